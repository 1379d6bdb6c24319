# Contract inputs of the machinepool role (v1alpha1): copy them as they are. The generated
# root always passes every one of them; the nullable ones may be null.

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

variable "machinepool_name" {
  description = "Name of the CAPI MachinePool."
  type        = string
}

variable "replicas" {
  description = "Desired number of members."
  type        = number
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

variable "failure_domains" {
  description = "Failure domains of the pool."
  type        = list(string)
}

variable "cluster_failure_domains" {
  description = "Failure domains of the cluster."
  type        = list(string)
}

variable "kubernetes_version" {
  description = "Kubernetes version of the pool, or null."
  type        = string
  default     = null
}

variable "node_labels" {
  description = "Labels for the pool's nodes."
  type        = map(string)
}

# Declared because the contract passes it; deliberately never read (a module
# that reads it must ignore_changes its desired-capacity attribute).
variable "autoscaling" {
  description = "Autoscaling settings (enabled, min, max); unused by the no-op module."
  type = object({
    enabled = bool
    min     = number
    max     = number
  })
}
