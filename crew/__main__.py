from crew.fast import main

main()
