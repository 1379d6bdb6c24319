# No-op machine pool module for CAPTF (contract v1alpha1, role machinepool).
# Only the built-in terraform_data resource is used: no provider, no network.
terraform {
  required_version = ">= 1.5"
}
