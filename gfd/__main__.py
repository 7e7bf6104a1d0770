from gfd.launch import main

main()
