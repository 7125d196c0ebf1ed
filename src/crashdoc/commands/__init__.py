"""One module per subcommand, and the pipeline that builds and feeds an engine for all of them."""
