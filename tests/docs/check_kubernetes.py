#!/usr/bin/env python3
"""Checks the form of the Kubernetes example in a Markdown file (docs/launch.md): its ```yaml
block must hold a headless Service selecting the master's pod, a master Job listening at the
Service's port for as many workers as the Indexed worker Job runs, workers told the Service's
name and port and the world size, and the token mounted from one Secret readable by its owner
only, where both commands read it. Prints each problem and exits 1, or prints one line and
exits 0."""
import re
import sys

import yaml


def flag(command, name):
    """The value after `name` in a command list, or None."""
    return command[command.index(name) + 1] if name in command else None


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def token_problems(pod, container, command, who):
    problems = []
    path = flag(command, "--token-file")
    if path is None:
        return [f"{who}: no --token-file"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounted = [m for m in container.get("volumeMounts", []) if path.startswith(m["mountPath"] + "/")]
    if not mounted:
        return [f"{who}: --token-file {path} is not under a mounted volume"]
    volume = volumes.get(mounted[0]["name"])
    if volume is None or "secret" not in volume:
        return [f"{who}: the token's volume is not a Secret"]
    mode = volume["secret"].get("defaultMode", 0o644)
    if mode & 0o077:
        problems.append(f"{who}: the token's defaultMode {oct(mode)} lets others read it "
                        "(dflow-worker refuses it)")
    return problems


def main(path):
    text = open(path).read()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    if len(blocks) != 1:
        print(f"{path}: expected one yaml block, found {len(blocks)}")
        return 1
    docs = [d for d in yaml.safe_load_all(blocks[0]) if d]
    problems = []
    services = [d for d in docs if d.get("kind") == "Service"]
    jobs = [d for d in docs if d.get("kind") == "Job"]
    if len(services) != 1 or len(jobs) != 2:
        print(f"{path}: expected a Service and two Jobs")
        return 1
    service = services[0]
    indexed = [j for j in jobs if j["spec"].get("completionMode") == "Indexed"]
    masters = [j for j in jobs if j["spec"].get("completionMode") != "Indexed"]
    if len(indexed) != 1 or len(masters) != 1:
        print(f"{path}: expected one Indexed worker Job and one master Job")
        return 1
    workers, master = indexed[0], masters[0]

    # The Service: headless, selecting the master's pod, at the rendezvous port.
    if service["spec"].get("clusterIP") != "None":
        problems.append("Service: not headless (clusterIP: None)")
    labels = master["spec"]["template"].get("metadata", {}).get("labels", {})
    selector = service["spec"].get("selector", {})
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        problems.append(f"Service: selector {selector} does not select the master's pod {labels}")
    ports = [p["port"] for p in service["spec"].get("ports", [])]

    # The master: listens at the Service's port and waits for the worker Job's count.
    mpod = master["spec"]["template"]["spec"]
    mcontainer = mpod["containers"][0]
    mcommand = [str(c) for c in mcontainer["command"]]
    rendezvous = flag(mcommand, "--rendezvous")
    if rendezvous is None:
        problems.append("master: no --rendezvous")
    else:
        port = int(rendezvous.rsplit(":", 1)[1])
        if port not in ports:
            problems.append(f"master: --rendezvous port {port} is not the Service's {ports}")
        for var in re.findall(r"\$\((\w+)\)", rendezvous):
            if var not in env_of(mcontainer):
                problems.append(f"master: --rendezvous uses $({var}), which its env lacks")
    n = int(flag(mcommand, "--workers") or 0)
    completions = workers["spec"].get("completions")
    parallelism = workers["spec"].get("parallelism")
    if not (n == completions == parallelism):
        problems.append(f"--workers {n}, completions {completions} and parallelism "
                        f"{parallelism} differ")
    problems += token_problems(mpod, mcontainer, mcommand, "master")
    if mpod.get("restartPolicy") != "Never":
        problems.append("master: restartPolicy is not Never")

    # The workers: told the Service's name and port, and the world size.
    wpod = workers["spec"]["template"]["spec"]
    wcontainer = wpod["containers"][0]
    wcommand = [str(c) for c in wcontainer["command"]]
    env = {k: v.get("value") for k, v in env_of(wcontainer).items()}
    if wcommand[0] != "dflow-worker":
        problems.append("workers: the command is not dflow-worker")
    if flag(wcommand, "--master") not in ("auto", None):
        problems.append("workers: --master is not auto (MASTER_ADDR would be ignored)")
    if env.get("MASTER_ADDR") != service["metadata"]["name"]:
        problems.append(f"workers: MASTER_ADDR {env.get('MASTER_ADDR')} is not the Service "
                        f"{service['metadata']['name']}")
    if int(env.get("MASTER_PORT", 0)) not in ports:
        problems.append(f"workers: MASTER_PORT {env.get('MASTER_PORT')} is not the Service's")
    if int(env.get("WORLD_SIZE", 0)) != completions:
        problems.append(f"workers: WORLD_SIZE {env.get('WORLD_SIZE')} is not the completions "
                        f"{completions}")
    problems += token_problems(wpod, wcontainer, wcommand, "workers")
    secrets = {v["secret"]["secretName"] for pod in (mpod, wpod) for v in pod.get("volumes", [])
               if "secret" in v}
    if len(secrets) != 1:
        problems.append(f"the master and the workers mount different Secrets: {sorted(secrets)}")

    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"kubernetes example: ok ({n} workers, rendezvous port {ports[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
