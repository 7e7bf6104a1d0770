from gfd.cli import main

main()
