from ava.cli.main import main

main()
