module gfd.invalid/e2e-tools/etcd

go 1.26

require go.etcd.io/etcd/server/v3 v3.6.16
