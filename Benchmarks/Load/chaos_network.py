"""The chaos row's hosts: a network namespace each, cut off and mended on demand (root only)."""
import random, subprocess


class Network:
    """One network namespace per host (a pair; with --chaos-database, also each database node), each
    joined to one bridge on this side (root only): any host can be cut off from everything but this
    side's reach to one port (a pair's engine's control port: the samples), or from some hosts only,
    and mended."""

    def __init__(self, count):
        token = "%06x" % random.randrange(1 << 24)
        subnet = f"10.215.{random.randint(1, 250)}"
        self.bridge, self.outside = f"tcb{token}", f"{subnet}.1"
        self.hosts = [(f"tch{token}{i}", f"{subnet}.{10 + i}") for i in range(count)]
        self.ip("link", "add", self.bridge, "type", "bridge")
        try:
            self.ip("addr", "add", f"{self.outside}/24", "dev", self.bridge)
            self.ip("link", "set", self.bridge, "up")
            for i, (namespace, address) in enumerate(self.hosts):
                near, far = f"tcv{token}{i}", f"tcw{token}{i}"
                self.ip("netns", "add", namespace)
                self.ip("link", "add", near, "type", "veth", "peer", "name", far)
                self.ip("link", "set", far, "netns", namespace)
                self.ip("link", "set", near, "master", self.bridge)
                self.ip("link", "set", near, "up")
                for arguments in (("addr", "add", f"{address}/24", "dev", far), ("link", "set", far, "up"),
                                  ("link", "set", "lo", "up")):
                    self.ip("netns", "exec", namespace, "ip", *arguments)
        except subprocess.CalledProcessError:
            self.remove()
            raise

    @staticmethod
    def ip(*arguments):
        subprocess.run(["ip", *arguments], check=True, capture_output=True)

    def launcher(self, index):
        return ["ip", "netns", "exec", self.hosts[index][0]]

    def cut(self, index, open_port=0, only_from=None):
        """Host `index` cut off from everything but `open_port` (a TCP port it serves), or, given
        `only_from`, from those hosts' addresses only."""
        if only_from:
            peers = ", ".join(only_from)
            drop_in, drop_out = f"ip saddr {{ {peers} }} drop;", f"ip daddr {{ {peers} }} drop;"
        else:
            drop_in = f"iifname \"lo\" accept; tcp dport {open_port} accept; drop;"
            drop_out = f"oifname \"lo\" accept; tcp sport {open_port} accept; drop;"
        rules = (f"table inet tonearm_cut {{\n"
                 f"  chain in {{ type filter hook input priority 0; {drop_in} }}\n"
                 f"  chain out {{ type filter hook output priority 0; {drop_out} }}\n"
                 f"}}\n")
        subprocess.run([*self.launcher(index), "nft", "-f", "-"], input=rules.encode(), check=True, capture_output=True)

    def mend(self, index):
        subprocess.run([*self.launcher(index), "nft", "delete", "table", "inet", "tonearm_cut"], check=True,
                       capture_output=True)

    def remove(self):
        for namespace, _ in self.hosts:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
