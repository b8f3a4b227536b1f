"""Where the pipeline runs: `aws` (the Pulumi stack, EKS, KubeRay) or `local` (a Ray head on 127.0.0.1)."""
