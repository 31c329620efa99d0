from poolkit.cli import process_main

process_main()
