# Cluster module for CAPTF (contract v1alpha1, role cluster) with one real provider, installed
# from the image's filesystem mirror (/captf/providers): hashicorp/time, built from
# github.com/hashicorp/terraform-provider-time by hack/build-tools.sh provider-time (the pin
# below is PROVIDER_TIME_VERSION of hack/versions.env without the "v"). The source has no host,
# so each engine looks under its own default registry host (registry.opentofu.org or
# registry.terraform.io); the mirror has both.
terraform {
  required_version = ">= 1.5"

  required_providers {
    time = {
      source  = "hashicorp/time"
      version = "0.13.1"
    }
  }
}
