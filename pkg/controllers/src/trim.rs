//! What objects lose before an informer stores them: server-side bookkeeping no controller reads (managed
//! fields and kubectl's last-applied copy). Used by the shared informers for Services and PersistentVolumes
//! and by [`CachedNode`](crate::cached_node::CachedNode) for nodes; public as
//! [`informers::trim_metadata`](crate::informers::trim_metadata).

use kube::Resource;

/// Annotation `kubectl apply` keeps the whole previous object in.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Removes server-side bookkeeping no controller reads: managed fields and kubectl's last-applied copy.
pub fn trim_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// [`trim_metadata`] applied to an owned object.
pub(crate) fn trimmed<K: Resource>(mut obj: K) -> K {
    trim_metadata(&mut obj);
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    #[test]
    fn trimming_drops_server_bookkeeping() {
        let mut service = Service::default();
        service.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        service.metadata.annotations = Some(
            [
                (LAST_APPLIED_ANNOTATION.to_string(), "{}".to_string()),
                ("keep".to_string(), "me".to_string()),
            ]
            .into(),
        );
        let service = trimmed(service);
        assert!(service.metadata.managed_fields.is_none());
        let annotations = service.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations["keep"], "me");
    }
}
