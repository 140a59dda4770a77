"""The ``rolloutbatch`` command (also ``kubectl rolloutbatch``): one module per subcommand group."""
