"""HTTP routers, one module per resource; each is a thin layer over `partbuild.api.service`."""
