"""/api/v1/job-runs: list, one run (what it built and read), cancel."""

from partbuild.api.routes.common import operations_router

router = operations_router("job_runs", "job_run", "cancel_job_run", tags=["job runs"])
