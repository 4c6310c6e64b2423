from crew.cli import main

main()
