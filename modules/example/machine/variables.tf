# Contract inputs of the machine role (v1alpha1): copy them as they are. The generated root
# always passes every one of them; the nullable ones may be null.

variable "captf_contract" {
  description = "Contract version the controller rendered (v1alpha1)."
  type        = string
}

variable "captf_cluster" {
  description = "The owning CAPI Cluster."
  type = object({
    name      = string
    namespace = string
  })
}

variable "captf_object" {
  description = "The Terraform* object being reconciled."
  type = object({
    kind      = string
    name      = string
    namespace = string
  })
}

variable "captf_cluster_outputs" {
  description = "The cluster module's exports (always set by the controller; the default only helps standalone use)."
  type        = any
  default     = null
}

variable "captf_tags" {
  description = "Tags to put on every taggable resource."
  type        = map(string)
}

variable "machine_name" {
  description = "Name of the CAPI Machine."
  type        = string
}

variable "bootstrap_data" {
  description = "Bootstrap data, base64-encoded."
  type        = string
  sensitive   = true
}

variable "bootstrap_format" {
  description = "Bootstrap data format (cloud-config, ignition)."
  type        = string
}

variable "failure_domain" {
  description = "Failure domain chosen by CAPI, or null."
  type        = string
  default     = null
}

variable "kubernetes_version" {
  description = "Kubernetes version of the machine, or null."
  type        = string
  default     = null
}

variable "control_plane" {
  description = "Whether the machine is a control plane machine."
  type        = bool
}
