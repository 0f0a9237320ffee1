"""The `partbuild` subcommands, one module per area; `partbuild.api.cli` puts them under the root group."""
