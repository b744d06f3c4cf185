#!/usr/bin/env python3
"""Checks the rendered kustomize overlays and Helm chart of deploy/ (called by hack/verify-manifests.sh).

Each rendered overlay or chart arrives as a stream of JSON objects (kubectl's conversion of the YAML that
`kubectl kustomize` or `helm template` printed), and so do the RBAC files it must render exactly.
Standard library only.

    check-manifests.py --readme README.md [--ccm-bin PATH] CASE...
    check-manifests.py --compare-upstream-chart UPSTREAM.json OURS.json

where each CASE is a JSON object: {"name", "rendered" (file), "provider", "mode" (deployment or
daemonset), "rbac" (files whose RBAC objects the overlay must render, no more and no fewer),
"external_secrets" (Secrets the operator creates), "args" (flags the container must have),
"priority" (the pods' priority class; default system-cluster-critical), "webhook" (true when the
lb-service admission webhook must be rendered: its flags, port, Service, registration and certificate)}. The second form checks that
cloud-provider-aws's chart and this project's, rendered with the same values file, give the same
workload, pod spec, ServiceAccount and RBAC.
"""

import argparse
import json
import re
import subprocess
import sys

WORKLOAD = "cloud-controller-manager"
NAMESPACE = "kube-system"
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "PriorityClass", "Namespace",
                  "ValidatingWebhookConfiguration"}
WEBHOOK_PORT = 10260
WEBHOOK_ARGS = ["--feature-gates=CloudControllerManagerWebhook=true", "--webhooks=lb-service",
                f"--webhook-secure-port={WEBHOOK_PORT}"]
RBAC_KINDS = {"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
COMMON_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service"}
MODE_KINDS = {
    "deployment": ({"Deployment", "PodDisruptionBudget"}, {"DaemonSet"}),
    "daemonset": ({"DaemonSet"}, {"Deployment", "PodDisruptionBudget"}),
}
REQUIRED_TOLERATIONS = [
    "node.cloudprovider.kubernetes.io/uninitialized",
    "node-role.kubernetes.io/control-plane",
    "CriticalAddonsOnly",
]
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def load_stream(path):
    """The JSON objects of a file holding several, one after the other."""
    text = open(path, encoding="utf-8").read()
    decoder = json.JSONDecoder()
    objects, at = [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return objects
        obj, at = decoder.raw_decode(text, at)
        # kubectl prints a List when asked for one; flatten it.
        if obj.get("kind") == "List" and "items" in obj:
            objects.extend(obj["items"])
        else:
            objects.append(obj)


def readme_flags(path):
    """The flags of the README's flag table (the first column of its rows)."""
    flags = set()
    in_table = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("## "):
            in_table = line.strip() == "## Flags"
            continue
        if in_table and line.startswith("| `-"):
            first = line.split("|")[1]
            flags.update(re.findall(r"`(-{1,2}[a-z0-9-]+)`", first))
    if not flags:
        raise SystemExit(f"check-manifests: no flag table found under '## Flags' in {path}")
    return flags


def ident(obj):
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace", "")
    return f"{obj.get('kind')}/{namespace + '/' if namespace else ''}{meta.get('name')}"


def sorted_list(values):
    return sorted(values or [])


def normalize_rule(rule):
    return {key: sorted_list(rule.get(key)) for key in
            ("apiGroups", "resources", "resourceNames", "nonResourceURLs", "verbs")}


def rbac_essence(obj):
    """What a (Cluster)Role, a binding or a ServiceAccount grants, in a comparable form."""
    kind = obj["kind"]
    if kind in ("Role", "ClusterRole"):
        rules = [normalize_rule(r) for r in obj.get("rules") or []]
        return {"rules": sorted(rules, key=lambda r: json.dumps(r, sort_keys=True)),
                "aggregationRule": obj.get("aggregationRule")}
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        # A ServiceAccount subject's API group is the core group, written or not.
        subjects = [{"apiGroup": "", **s} if s.get("kind") == "ServiceAccount" else s
                    for s in obj.get("subjects") or []]
        subjects = sorted(subjects, key=lambda s: json.dumps(s, sort_keys=True))
        return {"roleRef": obj.get("roleRef"), "subjects": subjects}
    # A ServiceAccount grants nothing by itself; only its existence counts (and its annotations,
    # e.g. for cloud identity, may differ).
    return {}


def describe_difference(rendered, expected):
    """The rules (or fields) only one side has, one per line."""
    lines = []
    if "rules" in rendered:
        def show(rule):
            return json.dumps({k: v for k, v in rule.items() if v}, sort_keys=True)
        have = [show(r) for r in rendered["rules"]]
        want = [show(r) for r in expected["rules"]]
        lines += [f"rendered only: {r}" for r in have if r not in want]
        lines += [f"file only:     {r}" for r in want if r not in have]
    for field in sorted(set(rendered) | set(expected)):
        if field != "rules" and rendered.get(field) != expected.get(field):
            lines.append(f"{field}: rendered {json.dumps(rendered.get(field), sort_keys=True)}, "
                         f"file {json.dumps(expected.get(field), sort_keys=True)}")
    return "".join(f"\n      {line}" for line in lines)


def rbac_objects(objects):
    return {ident(o): rbac_essence(o) for o in objects if o.get("kind") in RBAC_KINDS}


class Case:
    def __init__(self, spec, flags, ccm_bin):
        self.spec = spec
        self.name = spec["name"]
        self.flags = flags
        self.ccm_bin = ccm_bin
        self.errors = []

    def fail(self, message):
        self.errors.append(message)

    def check(self):
        objects = load_stream(self.spec["rendered"])
        if not objects:
            self.fail("rendered nothing")
            return
        self.check_objects(objects)
        self.check_kinds(objects)
        self.check_rbac(objects)
        workloads = [o for o in objects if o.get("kind") in ("Deployment", "DaemonSet")]
        if len(workloads) != 1:
            self.fail(f"expected one workload (Deployment or DaemonSet), found {[ident(o) for o in workloads]}")
            return
        self.check_workload(workloads[0], objects)

    def check_objects(self, objects):
        seen = set()
        for index, obj in enumerate(objects):
            where = f"object {index} ({ident(obj)})"
            if not isinstance(obj, dict):
                self.fail(f"object {index} is not a mapping")
                continue
            for field in ("apiVersion", "kind"):
                if not isinstance(obj.get(field), str) or not obj[field]:
                    self.fail(f"{where}: no {field}")
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not meta.get("name"):
                self.fail(f"{where}: no metadata.name")
                continue
            if obj.get("kind") in CLUSTER_SCOPED:
                if "namespace" in meta:
                    self.fail(f"{where}: a cluster-scoped object with a namespace")
            elif meta.get("namespace") != NAMESPACE:
                self.fail(f"{where}: namespace {meta.get('namespace')!r}, expected {NAMESPACE!r}")
            key = (obj.get("apiVersion", "").rpartition("/")[0], ident(obj))
            if key in seen:
                self.fail(f"{where}: rendered twice")
            seen.add(key)
            if obj.get("kind") == "ConfigMap":
                for k, v in (obj.get("data") or {}).items():
                    if not isinstance(v, str):
                        self.fail(f"{where}: data[{k!r}] is not a string")

    def check_kinds(self, objects):
        kinds = {o.get("kind") for o in objects}
        required, forbidden = MODE_KINDS[self.spec["mode"]]
        missing = sorted((COMMON_KINDS | required) - kinds)
        if missing:
            self.fail(f"mode {self.spec['mode']}: missing kinds {missing}")
        extra = sorted(forbidden & kinds)
        if extra:
            self.fail(f"mode {self.spec['mode']}: kinds of the other mode {extra}")

    def check_rbac(self, objects):
        expected = {}
        for path in self.spec["rbac"]:
            for key, value in rbac_objects(load_stream(path["json"])).items():
                if key in expected:
                    self.fail(f"RBAC: {key} is defined twice in the expected files")
                expected[key] = (value, path["file"])
        rendered = rbac_objects(objects)
        files = ", ".join(p["file"] for p in self.spec["rbac"])
        for key in sorted(set(expected) - set(rendered)):
            self.fail(f"RBAC: {key} of {expected[key][1]} is not rendered")
        for key in sorted(set(rendered) - set(expected)):
            self.fail(f"RBAC: {key} is rendered but is in none of {files}")
        for key in sorted(set(rendered) & set(expected)):
            want, file = expected[key]
            if rendered[key] != want:
                self.fail(f"RBAC: {key} differs from {file}:" + describe_difference(rendered[key], want))

    def check_workload(self, workload, objects):
        kind = workload["kind"]
        where = ident(workload)
        meta = workload["metadata"]
        spec = workload.get("spec") or {}
        template = spec.get("template") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        pod = template.get("spec") or {}
        if meta.get("name") != WORKLOAD:
            self.fail(f"{where}: expected the name {WORKLOAD}")
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            self.fail(f"{where}: selector {selector} does not select the pod labels {labels}")
        if labels.get("app.kubernetes.io/name") != WORKLOAD:
            self.fail(f"{where}: pods need the label app.kubernetes.io/name={WORKLOAD} (the e2e suite finds them by it)")

        by_kind = {}
        for obj in objects:
            by_kind.setdefault(obj.get("kind"), {})[obj["metadata"]["name"]] = obj

        account = pod.get("serviceAccountName")
        if account not in by_kind.get("ServiceAccount", {}):
            self.fail(f"{where}: serviceAccountName {account!r} is not rendered")
        priority = self.spec.get("priority", "system-cluster-critical")
        if pod.get("priorityClassName") != priority:
            self.fail(f"{where}: priorityClassName {pod.get('priorityClassName')!r}, expected {priority}")
        keys = {t.get("key") for t in pod.get("tolerations") or []}
        for key in REQUIRED_TOLERATIONS:
            if key not in keys:
                self.fail(f"{where}: no toleration for {key}")

        if kind == "Deployment":
            if spec.get("replicas") != 2:
                self.fail(f"{where}: replicas {spec.get('replicas')!r}, expected 2")
            budgets = list(by_kind.get("PodDisruptionBudget", {}).values())
            if len(budgets) != 1:
                self.fail(f"{where}: expected one PodDisruptionBudget, found {len(budgets)}")
            for pdb in budgets:
                pspec = pdb.get("spec") or {}
                psel = (pspec.get("selector") or {}).get("matchLabels") or {}
                if not psel or any(labels.get(k) != v for k, v in psel.items()):
                    self.fail(f"{ident(pdb)}: selector {psel} does not select the pods")
                if pspec.get("minAvailable") != 1 and pspec.get("maxUnavailable") != 1:
                    self.fail(f"{ident(pdb)}: expected minAvailable 1 or maxUnavailable 1")
        else:
            if pod.get("hostNetwork") is not True:
                self.fail(f"{where}: the DaemonSet mode runs in the host network (hostNetwork: true)")
            if (pod.get("nodeSelector") or {}).get(CONTROL_PLANE_LABEL) != "":
                self.fail(f"{where}: the DaemonSet mode runs on control-plane nodes (nodeSelector {CONTROL_PLANE_LABEL}: \"\")")
            if (spec.get("updateStrategy") or {}).get("type") != "RollingUpdate":
                self.fail(f"{where}: expected updateStrategy RollingUpdate")
            for field in ("replicas", "strategy"):
                if field in spec:
                    self.fail(f"{where}: a DaemonSet has no spec.{field}")

        containers = pod.get("containers") or []
        if [c.get("name") for c in containers] != [WORKLOAD]:
            self.fail(f"{where}: expected one container named {WORKLOAD}, found {[c.get('name') for c in containers]}")
            return
        container = containers[0]
        self.check_args(where, container)
        self.check_serving(where, container, labels, by_kind)
        self.check_references(where, pod, container, by_kind)
        self.check_data_path_privileges(where, pod, container, by_kind)

    def check_data_path_privileges(self, where, pod, container, by_kind):
        """A fake cloud-config whose data path adds addresses to an interface needs a root container with
        NET_ADMIN (and NET_BIND_SERVICE for ports below 1024) in the host network."""
        configs = [value for cm in by_kind.get("ConfigMap", {}).values()
                   for value in (cm.get("data") or {}).values()]
        if not any(re.search(r"^dataPath:\s*$", v, re.M) and re.search(r"^\s+interface:", v, re.M)
                   for v in configs):
            return
        added = set(((container.get("securityContext") or {}).get("capabilities") or {}).get("add") or [])
        for capability in ("NET_ADMIN", "NET_BIND_SERVICE"):
            if capability not in added:
                self.fail(f"{where}: the data path's interface needs the capability {capability}")
        security = pod.get("securityContext") or {}
        if security.get("runAsUser") != 0 or security.get("runAsNonRoot") is not False:
            self.fail(f"{where}: capabilities take effect for root only: runAsUser 0, runAsNonRoot false")
        if pod.get("hostNetwork") is not True:
            self.fail(f"{where}: ingress addresses on an interface the host reaches need hostNetwork: true")

    def check_args(self, where, container):
        if container.get("command"):
            self.fail(f"{where}: the image's entrypoint is the daemon; use args, not command")
        args = container.get("args") or []
        names = []
        for arg in args:
            if not arg.startswith("-"):
                self.fail(f"{where}: argument {arg!r} is not a flag")
                continue
            name = arg.split("=", 1)[0]
            names.append(name)
            if name not in self.flags:
                self.fail(f"{where}: flag {name} is not in the README's flag table")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            self.fail(f"{where}: flags given twice: {dupes}")
        for wanted in [f"--cloud-provider={self.spec['provider']}", "--leader-elect=true",
                       "--secure-port=10258"] + self.spec.get("args", []):
            if wanted not in args:
                self.fail(f"{where}: missing the argument {wanted}")
        if self.ccm_bin:
            # clap parses every flag and value before --version answers: exit 0 means the binary
            # accepts the arguments (their values' syntax included).
            run = subprocess.run([self.ccm_bin, *args, "--version"], capture_output=True, text=True)
            if run.returncode != 0:
                self.fail(f"{where}: {self.ccm_bin} refuses the arguments {args}: "
                          f"{(run.stderr or run.stdout).strip().splitlines()[:1]}")

    def check_serving(self, where, container, labels, by_kind):
        ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        if ports.get("https") != 10258:
            self.fail(f"{where}: expected the container port https: 10258, found {ports}")
        for probe_name, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = (container.get(probe_name) or {}).get("httpGet") or {}
            if get.get("scheme") != "HTTPS" or get.get("path") != path or get.get("port") not in (10258, "https"):
                self.fail(f"{where}: {probe_name} should be GET {path} over HTTPS on 10258, found {get}")
        services = [s for s in by_kind.get("Service", {}).values()
                    if not any(p.get("targetPort") == "webhook" for p in (s.get("spec") or {}).get("ports") or [])]
        if len(services) != 1:
            self.fail(f"expected one Service (the metrics Service), found {len(services)}")
        if self.spec.get("webhook"):
            self.check_webhook(where, container, labels, by_kind)
        elif "ValidatingWebhookConfiguration" in by_kind or len(services) != len(by_kind.get("Service", {})):
            self.fail(f"{where}: a webhook is rendered that the case does not ask for")
        for service in services:
            sspec = service.get("spec") or {}
            sel = sspec.get("selector") or {}
            if not sel or any(labels.get(k) != v for k, v in sel.items()):
                self.fail(f"{ident(service)}: selector {sel} does not select the pods")
            if not any(p.get("port") == 10258 and p.get("targetPort") in ("https", 10258)
                       for p in sspec.get("ports") or []):
                self.fail(f"{ident(service)}: expected port 10258 to the pods' https port")

    def check_webhook(self, where, container, labels, by_kind):
        """The lb-service webhook: flags, port, a Service to it, a registration that calls that Service
        safely, and the certificate the pods mount."""
        args = container.get("args") or []
        for wanted in WEBHOOK_ARGS:
            if wanted not in args:
                self.fail(f"{where}: the webhook needs the argument {wanted}")
        ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        if ports.get("webhook") != WEBHOOK_PORT:
            self.fail(f"{where}: expected the container port webhook: {WEBHOOK_PORT}, found {ports}")
        services = {name: s for name, s in by_kind.get("Service", {}).items()
                    if any(p.get("targetPort") == "webhook" for p in (s.get("spec") or {}).get("ports") or [])}
        if len(services) != 1:
            self.fail(f"expected one Service to the webhook port, found {sorted(services)}")
            return
        (service_name, service), = services.items()
        sel = (service.get("spec") or {}).get("selector") or {}
        if not sel or any(labels.get(k) != v for k, v in sel.items()):
            self.fail(f"{ident(service)}: selector {sel} does not select the pods")
        configurations = list(by_kind.get("ValidatingWebhookConfiguration", {}).values())
        if len(configurations) != 1:
            self.fail(f"expected one ValidatingWebhookConfiguration, found {len(configurations)}")
            return
        configuration = configurations[0]
        for hook in configuration.get("webhooks") or []:
            name = f"{ident(configuration)} {hook.get('name')}"
            client = (hook.get("clientConfig") or {}).get("service") or {}
            if (client.get("name"), client.get("namespace"), client.get("path")) != (service_name, NAMESPACE, "/lb-service"):
                self.fail(f"{name}: calls {client}, not {NAMESPACE}/{service_name} /lb-service")
            if client.get("port", 443) not in [p.get("port") for p in (service.get("spec") or {}).get("ports") or []]:
                self.fail(f"{name}: port {client.get('port', 443)} is not a port of {service_name}")
            for field, value in (("failurePolicy", "Ignore"), ("sideEffects", "None"),
                                 ("admissionReviewVersions", ["v1"])):
                if hook.get(field) != value:
                    self.fail(f"{name}: {field} {hook.get(field)!r}, expected {value!r}")
            if not 1 <= hook.get("timeoutSeconds", 10) <= 10:
                self.fail(f"{name}: timeoutSeconds {hook.get('timeoutSeconds')} is not 1 to 10")
            if not any("services" in (r.get("resources") or []) and set(r.get("operations") or []) == {"CREATE", "UPDATE"}
                       for r in hook.get("rules") or []):
                self.fail(f"{name}: no rule for CREATE and UPDATE of services")
        certificates = by_kind.get("Certificate", {})
        injected = ((configuration.get("metadata") or {}).get("annotations") or {}).get("cert-manager.io/inject-ca-from")
        if injected != f"{NAMESPACE}/{next(iter(certificates), '')}" or len(certificates) != 1:
            self.fail(f"{ident(configuration)}: the CA should come from the one Certificate, found {injected!r}")
        for certificate in certificates.values():
            cspec = certificate.get("spec") or {}
            if f"{service_name}.{NAMESPACE}.svc" not in (cspec.get("dnsNames") or []):
                self.fail(f"{ident(certificate)}: no DNS name {service_name}.{NAMESPACE}.svc")
            issuer = (cspec.get("issuerRef") or {}).get("name")
            if issuer not in by_kind.get("Issuer", {}):
                self.fail(f"{ident(certificate)}: issuer {issuer!r} is not rendered")

    def check_references(self, where, pod, container, by_kind):
        config_maps = by_kind.get("ConfigMap", {})
        secrets = set(by_kind.get("Secret", {})) | set(self.spec.get("external_secrets", []))
        # The Secrets cert-manager writes.
        secrets |= {(c.get("spec") or {}).get("secretName") for c in by_kind.get("Certificate", {}).values()}
        volumes = {}
        for volume in pod.get("volumes") or []:
            volumes[volume.get("name")] = volume
            if "configMap" in volume:
                name = volume["configMap"].get("name")
                if name not in config_maps:
                    self.fail(f"{where}: volume {volume.get('name')} refers to ConfigMap {name!r}, which is not rendered")
            if "secret" in volume and volume["secret"].get("secretName") not in secrets:
                self.fail(f"{where}: volume {volume.get('name')} refers to an unknown Secret")
        mounts = {}
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                self.fail(f"{where}: volumeMount {mount.get('name')} has no volume")
            else:
                mounts[mount.get("mountPath", "").rstrip("/")] = volumes[mount["name"]]
        for source in container.get("envFrom") or []:
            ref = source.get("configMapRef") or source.get("secretRef") or {}
            known = config_maps if "configMapRef" in source else secrets
            if ref.get("name") not in known and not ref.get("optional"):
                self.fail(f"{where}: envFrom refers to {ref.get('name')!r}, which is not rendered")
        for env in container.get("env") or []:
            source = env.get("valueFrom") or {}
            if "secretKeyRef" in source and source["secretKeyRef"].get("name") not in secrets:
                self.fail(f"{where}: env {env.get('name')} refers to an unknown Secret")
            if "configMapKeyRef" in source and source["configMapKeyRef"].get("name") not in config_maps:
                self.fail(f"{where}: env {env.get('name')} refers to a ConfigMap that is not rendered")
        # --cloud-config must name a file of a mounted ConfigMap.
        for arg in container.get("args") or []:
            if not arg.startswith("--cloud-config="):
                continue
            path = arg.split("=", 1)[1]
            directory, _, file = path.rpartition("/")
            volume = mounts.get(directory)
            if volume is None:
                self.fail(f"{where}: --cloud-config={path} is not in a mounted volume")
            elif "configMap" in volume:
                data = config_maps.get(volume["configMap"].get("name"), {}).get("data") or {}
                if file not in data:
                    self.fail(f"{where}: --cloud-config={path}: the ConfigMap has no key {file!r} ({sorted(data)})")


# What cloud-provider-aws's chart sets in its workload's pod template, compared field by field.
UPSTREAM_POD_FIELDS = ["serviceAccountName", "priorityClassName", "dnsPolicy", "hostNetwork", "nodeSelector",
                       "tolerations", "securityContext", "imagePullSecrets", "volumes"]
UPSTREAM_CONTAINER_FIELDS = ["image", "args", "env", "resources", "securityContext", "volumeMounts"]


def upstream_chart_differences(upstream, ours):
    """What the two charts' renders of one values file do not share: workload, pod spec, ServiceAccount,
    RBAC rules and subjects (names and kinds of upstream's objects; ours may have more)."""
    errors = []

    def only(objects, kind):
        found = [o for o in objects if o.get("kind") == kind]
        return found[0] if len(found) == 1 else None

    up_workload, our_workload = only(upstream, "DaemonSet"), only(ours, "DaemonSet")
    if up_workload is None or our_workload is None:
        return [f"expected one DaemonSet in each render, found upstream {up_workload is not None}, ours "
                f"{our_workload is not None}"]
    for field in ("name", "namespace"):
        if up_workload["metadata"].get(field) != our_workload["metadata"].get(field):
            errors.append(f"DaemonSet {field}: upstream {up_workload['metadata'].get(field)!r}, ours "
                          f"{our_workload['metadata'].get(field)!r}")
    if up_workload["spec"].get("selector") != our_workload["spec"].get("selector"):
        errors.append(f"selector: upstream {up_workload['spec'].get('selector')}, ours "
                      f"{our_workload['spec'].get('selector')} (an upgrade from upstream's chart needs the same)")
    up_template, our_template = up_workload["spec"]["template"], our_workload["spec"]["template"]
    up_annotations = (up_template.get("metadata") or {}).get("annotations") or {}
    our_annotations = (our_template.get("metadata") or {}).get("annotations") or {}
    for key, value in up_annotations.items():
        if our_annotations.get(key) != value:
            errors.append(f"pod annotation {key}: upstream {value!r}, ours {our_annotations.get(key)!r}")
    for field in UPSTREAM_POD_FIELDS:
        if up_template["spec"].get(field) != our_template["spec"].get(field):
            errors.append(f"pod spec.{field}: upstream {json.dumps(up_template['spec'].get(field))}, ours "
                          f"{json.dumps(our_template['spec'].get(field))}")
    up_container = up_template["spec"]["containers"][0]
    our_container = our_template["spec"]["containers"][0]
    for field in UPSTREAM_CONTAINER_FIELDS:
        if up_container.get(field) != our_container.get(field):
            errors.append(f"container {field}: upstream {json.dumps(up_container.get(field))}, ours "
                          f"{json.dumps(our_container.get(field))}")

    def by_ident(objects, kinds):
        return {(o["kind"], o["metadata"]["name"]): o for o in objects if o.get("kind") in kinds}

    our_objects = by_ident(ours, RBAC_KINDS)
    for key, up in by_ident(upstream, RBAC_KINDS).items():
        mine = our_objects.get(key)
        if mine is None:
            errors.append(f"{key[0]}/{key[1]} of upstream's chart is not rendered")
            continue
        if key[0] == "ServiceAccount":
            for field in ("namespace", "annotations"):
                if up["metadata"].get(field) != mine["metadata"].get(field):
                    errors.append(f"ServiceAccount {field}: upstream {up['metadata'].get(field)!r}, ours "
                                  f"{mine['metadata'].get(field)!r}")
        elif rbac_essence(up) != rbac_essence(mine):
            errors.append(f"{key[0]}/{key[1]}:" + describe_difference(rbac_essence(mine), rbac_essence(up)))
    return errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--readme")
    parser.add_argument("--ccm-bin")
    parser.add_argument("--compare-upstream-chart", nargs=2, metavar=("UPSTREAM", "OURS"))
    parser.add_argument("cases", nargs="*")
    options = parser.parse_args()
    if options.compare_upstream_chart:
        upstream, ours = (load_stream(path) for path in options.compare_upstream_chart)
        errors = upstream_chart_differences(upstream, ours)
        for error in errors:
            print(f"  - {error}")
        print("FAIL" if errors else "ok  ", "cloud-provider-aws's chart and deploy/helm with the same values")
        return 1 if errors else 0
    if not options.readme or not options.cases:
        parser.error("--readme and at least one CASE are needed")
    flags = readme_flags(options.readme)
    failed = 0
    for raw in options.cases:
        case = Case(json.loads(raw), flags, options.ccm_bin)
        try:
            case.check()
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            case.fail(f"cannot check: {type(err).__name__}: {err}")
        if case.errors:
            failed += 1
            print(f"FAIL {case.name}")
            for error in case.errors:
                print(f"  - {error}")
        else:
            print(f"ok   {case.name}")
    if failed:
        print(f"check-manifests: {failed} of {len(options.cases)} failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
