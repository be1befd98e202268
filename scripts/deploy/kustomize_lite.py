#!/usr/bin/env python3
"""Renders deploy/k8s overlays for scripts/test-deploy where no kustomize binary can be had
(Debian 12 packages none). It implements only what deploy/k8s uses, with kustomize's meaning:

- resources: files (multi-document YAML) and directories holding a kustomization.yaml
- configMapGenerator (name, files, behavior create/replace/merge) with a content-hash name suffix,
  and generatorOptions.disableNameSuffixHash
- patches: strategic-merge patch files, aimed by their kind and metadata.name; lists of objects
  with a `name` (containers, volumes, env, volumeMounts, ...) merge by name, others are replaced
- namePrefix, with the ConfigMap references of pod templates renamed to match

Anything else in a kustomization is an error, so the files cannot drift past what this checks.
The hash suffix is not kustomize's own (a stable hash of the data, 10 characters): names differ
from `kubectl kustomize`, structure does not. Use the real kustomize (`kubectl apply -k`) to deploy.

    kustomize_lite.py DIR    # prints the rendered resources as multi-document YAML
"""

import copy
import hashlib
import json
import os
import sys

import yaml

KNOWN = {"apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions", "patches", "namePrefix"}


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def merge(base, patch):
    """Strategic merge, as far as deploy/k8s needs it."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and all(
        isinstance(i, dict) and "name" in i for i in base + patch
    ):
        out = [copy.deepcopy(i) for i in base]
        index = {item["name"]: n for n, item in enumerate(out)}
        for item in patch:
            if item["name"] in index:
                out[index[item["name"]]] = merge(out[index[item["name"]]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def key(res):
    return (res["kind"], res["metadata"]["name"])


def config_map(gen, here):
    data = {}
    for entry in gen.get("files", []):
        name, _, path = entry.partition("=")
        path = path or name
        with open(os.path.join(here, path), encoding="utf-8") as f:
            data[os.path.basename(name)] = f.read()
    for literal in gen.get("literals", []):
        k, _, v = literal.partition("=")
        data[k] = v
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data}


def pod_specs(res):
    spec = res.get("spec", {})
    if res["kind"] == "Pod":
        yield spec
    elif "template" in spec:
        yield spec["template"].get("spec", {})


def rename_config_maps(res, names):
    """Points a workload's ConfigMap references at the generated names."""
    for spec in pod_specs(res):
        for vol in spec.get("volumes", []):
            cm = vol.get("configMap")
            if cm and cm.get("name") in names:
                cm["name"] = names[cm["name"]]
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            for src in c.get("envFrom", []):
                ref = src.get("configMapRef")
                if ref and ref.get("name") in names:
                    ref["name"] = names[ref["name"]]
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("configMapKeyRef")
                if ref and ref.get("name") in names:
                    ref["name"] = names[ref["name"]]


def build(here):
    """Returns (resources, generated ConfigMap base names) of the kustomization in `here`."""
    kfile = os.path.join(here, "kustomization.yaml")
    k = load_docs(kfile)[0]
    unknown = set(k) - KNOWN
    if unknown:
        sys.exit(f"{kfile}: kustomize_lite does not implement {sorted(unknown)}")
    resources, generated = [], set()
    for entry in k.get("resources", []):
        path = os.path.join(here, entry)
        if os.path.isdir(path):
            sub, sub_generated = build(path)
            resources += sub
            generated |= sub_generated
        else:
            resources += load_docs(path)
    for gen in k.get("configMapGenerator", []):
        cm = config_map(gen, here)
        behavior = gen.get("behavior", "create")
        existing = [r for r in resources if key(r) == key(cm)]
        if behavior == "create":
            if existing:
                sys.exit(f"{kfile}: ConfigMap {gen['name']} exists already (use behavior: replace or merge)")
            resources.append(cm)
        elif behavior in ("replace", "merge"):
            if not existing:
                sys.exit(f"{kfile}: no ConfigMap {gen['name']} to {behavior}")
            if behavior == "merge":
                cm["data"] = {**existing[0].get("data", {}), **cm["data"]}
            resources[resources.index(existing[0])] = cm
        else:
            sys.exit(f"{kfile}: unknown behavior {behavior}")
        if not k.get("generatorOptions", {}).get("disableNameSuffixHash"):
            generated.add(gen["name"])
    for patch in k.get("patches", []):
        if set(patch) != {"path"}:
            sys.exit(f"{kfile}: only `patches: - path:` (strategic merge) is implemented")
        for doc in load_docs(os.path.join(here, patch["path"])):
            targets = [n for n, r in enumerate(resources) if key(r) == key(doc)]
            if not targets:
                sys.exit(f"{kfile}: patch {patch['path']} matches no {key(doc)}")
            resources[targets[0]] = merge(resources[targets[0]], doc)
    prefix = k.get("namePrefix", "")
    if prefix:
        names = {}
        for r in resources:
            old = r["metadata"]["name"]
            r["metadata"]["name"] = prefix + old
            if r["kind"] == "ConfigMap":
                names[old] = prefix + old
        for r in resources:
            rename_config_maps(r, names)
        generated = {prefix + g for g in generated}
    return resources, generated


def render(here):
    resources, generated = build(here)
    names = {}
    for r in resources:
        if r["kind"] == "ConfigMap" and r["metadata"]["name"] in generated:
            digest = hashlib.sha256(json.dumps(r.get("data", {}), sort_keys=True).encode()).hexdigest()
            names[r["metadata"]["name"]] = f"{r['metadata']['name']}-{digest[:10]}"
            r["metadata"]["name"] = names[r["metadata"]["name"]]
    for r in resources:
        rename_config_maps(r, names)
    return resources


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    yaml.safe_dump_all(render(sys.argv[1]), sys.stdout, sort_keys=False, width=100)
