# Contract inputs of the cluster role (v1alpha1): copy them as they are. The generated root
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
  description = "The TerraformCluster being reconciled."
  type = object({
    kind      = string
    name      = string
    namespace = string
  })
}

variable "captf_tags" {
  description = "Tags to put on every taggable resource."
  type        = map(string)
}

variable "control_plane_endpoint" {
  description = "Endpoint set by the user on the TerraformCluster, or null."
  type = object({
    host = string
    port = number
  })
  default = null
}

variable "kubernetes_version" {
  description = "Kubernetes version of the control plane, or null."
  type        = string
  default     = null
}

variable "control_plane_initialized" {
  description = "Whether the control plane has been initialized."
  type        = bool
}

variable "cluster_network" {
  description = "Cluster.spec.clusterNetwork, or null."
  type = object({
    pods            = optional(list(string), [])
    services        = optional(list(string), [])
    service_domain  = optional(string)
    api_server_port = optional(number)
  })
  default = null
}
