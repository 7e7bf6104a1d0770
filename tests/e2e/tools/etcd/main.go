// The etcd server binary: go.etcd.io/etcd/server/v3 ships the server as the etcdmain
// package; etcd's own main (the repository's root module) only calls it, like this.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
