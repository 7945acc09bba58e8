from mpictl.cli import main

main()
