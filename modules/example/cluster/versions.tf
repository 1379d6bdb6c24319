# Which engine and providers the module needs. The image carries the providers in a filesystem
# mirror (/captf/providers): a Job never downloads anything. The source has no host, so each
# engine looks under its own default registry host; the mirror the kit builds has both.
terraform {
  required_version = ">= 1.5"

  required_providers {
    kubectl = {
      source  = "gavinbunney/kubectl"
      version = "1.19.0"
    }
  }
}

# The "cloud" of this example is the Kubernetes API the Job runs in: the provider reads the
# Job's ServiceAccount token (in-cluster configuration). Grant that account what the module
# manages (docs/modules.md). A module for a real cloud reads its credentials from the identity
# mounted under /var/run/captf/credentials instead.
provider "kubectl" {
  load_config_file = false
}
