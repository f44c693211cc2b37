from django.apps import AppConfig


class LaunchConfig(AppConfig):
    name = "launch"
    verbose_name = "Launch (recipes of the runs Yardstick starts)"

    def ready(self):
        # trainer never imports launch: the launched kind of run makes itself known to trainer's registry.
        from launch.kind import LAUNCHED
        from trainer.kinds import register

        register(LAUNCHED)
        # and where a launch runs: a node's launch worker, a Ray cluster or a Slurm cluster (launch/executors.py)
        from launch.executors import register as register_executor
        from launch.kind import NODE
        from launch.on_ray import RayExecutor
        from launch.on_slurm import SlurmExecutor

        register_executor(NODE)
        register_executor(RayExecutor())
        register_executor(SlurmExecutor())
        # here: trainer.views is loaded once every app is; /api/jobs/<id> then shows what a launched job ran
        from trainer.views import add_detail_part

        add_detail_part("launch", lambda job: job.launch.to_dict() if hasattr(job, "launch") else None)
