//! Events per object after the chaos: how many occurrences (an aggregated Event counts its `count`) and
//! how many Event objects each Node and Service got, their distribution, and the worst object.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Event;

/// Upper bounds (inclusive) of the distribution's buckets; the last bucket is everything above.
const BUCKETS: &[u64] = &[1, 2, 3, 4, 6, 10, 15, 20];

/// The events of one involved object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectEvents {
    /// Event objects about it.
    pub event_objects: u64,
    /// Occurrences (the sum of the Events' `count`).
    pub occurrences: u64,
    /// Occurrences by reason.
    pub reasons: BTreeMap<String, u64>,
}

/// The events of every object of one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindEvents {
    /// By object name (`namespace/name` for namespaced objects).
    pub objects: BTreeMap<String, ObjectEvents>,
}

impl KindEvents {
    /// The object with the most occurrences (the first by name among equals).
    pub fn worst(&self) -> Option<(&String, &ObjectEvents)> {
        self.objects
            .iter()
            .max_by(|a, b| a.1.occurrences.cmp(&b.1.occurrences).then(b.0.cmp(a.0)))
    }

    /// The most Event objects any one object got.
    pub fn most_event_objects(&self) -> u64 {
        self.objects
            .values()
            .map(|o| o.event_objects)
            .max()
            .unwrap_or(0)
    }

    /// How many objects got how many occurrences, by bucket: `(label, objects)`.
    pub fn distribution(&self) -> Vec<(String, usize)> {
        let mut counts = vec![0usize; BUCKETS.len() + 1];
        for o in self.objects.values() {
            let bucket = BUCKETS
                .iter()
                .position(|upper| o.occurrences <= *upper)
                .unwrap_or(BUCKETS.len());
            counts[bucket] += 1;
        }
        let mut labels = Vec::new();
        let mut lower = 1;
        for upper in BUCKETS {
            labels.push(if lower == *upper {
                format!("{upper}")
            } else {
                format!("{lower}-{upper}")
            });
            lower = upper + 1;
        }
        labels.push(format!(">{}", BUCKETS[BUCKETS.len() - 1]));
        labels
            .into_iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// One line: totals, the distribution of occurrences per object, and the worst object.
    pub fn describe(&self, kind: &str) -> String {
        let occurrences: u64 = self.objects.values().map(|o| o.occurrences).sum();
        let event_objects: u64 = self.objects.values().map(|o| o.event_objects).sum();
        let mut out = format!(
            "{kind}: {} objects, {occurrences} occurrences in {event_objects} Event objects; \
             occurrences per object:",
            self.objects.len()
        );
        for (label, n) in self.distribution() {
            let _ = write!(out, " {label}: {n},");
        }
        out.pop();
        if let Some((name, worst)) = self.worst() {
            let reasons: Vec<String> = worst
                .reasons
                .iter()
                .map(|(reason, n)| format!("{reason} {n}"))
                .collect();
            let _ = write!(
                out,
                "; max {} ({name}: {}), at most {} Event objects for one object",
                worst.occurrences,
                reasons.join(", "),
                self.most_event_objects()
            );
        }
        out
    }
}

/// The events grouped by the kind and name of their involved object.
pub fn by_object(events: &[Event]) -> BTreeMap<String, KindEvents> {
    let mut kinds: BTreeMap<String, KindEvents> = BTreeMap::new();
    for event in events {
        let regarding = &event.involved_object;
        let kind = regarding.kind.clone().unwrap_or_default();
        let name = match &regarding.namespace {
            Some(ns) if !ns.is_empty() => {
                format!("{ns}/{}", regarding.name.as_deref().unwrap_or(""))
            }
            _ => regarding.name.clone().unwrap_or_default(),
        };
        let count = crate::cluster::event_occurrences(event);
        let object = kinds
            .entry(kind)
            .or_default()
            .objects
            .entry(name)
            .or_default();
        object.event_objects += 1;
        object.occurrences += count;
        *object
            .reasons
            .entry(event.reason.clone().unwrap_or_default())
            .or_insert(0) += count;
    }
    kinds
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;

    fn event(kind: &str, name: &str, reason: &str, count: Option<i32>) -> Event {
        Event {
            involved_object: ObjectReference {
                kind: Some(kind.into()),
                name: Some(name.into()),
                namespace: (kind == "Service").then(|| "default".to_string()),
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            count,
            ..Event::default()
        }
    }

    #[test]
    fn events_are_counted_per_object_with_their_count() {
        let mut events = vec![
            event("Service", "a", "EnsuringLoadBalancer", Some(3)),
            event("Service", "a", "EnsuredLoadBalancer", None),
            event("Service", "a", "EnsuringLoadBalancer", Some(2)),
            event("Service", "b", "EnsuredLoadBalancer", Some(1)),
        ];
        events.extend((0..30).map(|i| event("Node", &format!("n{i}"), "Synced", None)));
        events.push(event("Node", "n0", "DeletingNode", Some(25)));
        let kinds = by_object(&events);
        let services = &kinds["Service"];
        let a = &services.objects["default/a"];
        assert_eq!((a.event_objects, a.occurrences), (3, 6));
        assert_eq!(a.reasons["EnsuringLoadBalancer"], 5);
        assert_eq!(services.worst().unwrap().0, "default/a");
        assert_eq!(services.most_event_objects(), 3);
        assert_eq!(
            services.distribution(),
            [("1".to_string(), 1), ("5-6".to_string(), 1)]
        );
        let nodes = &kinds["Node"];
        assert_eq!(
            nodes.distribution(),
            [("1".to_string(), 29), (">20".to_string(), 1)]
        );
        let line = nodes.describe("Node");
        assert!(
            line.starts_with("Node: 30 objects, 55 occurrences in 31 Event objects; occurrences per object: 1: 29, >20: 1; max 26 (n0: DeletingNode 25, Synced 1)"),
            "{line}"
        );
    }
}
