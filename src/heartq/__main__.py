from heartq.cli.main import main

main()
