"""PostgreSQL kept highly available by pg_auto_failover (Debian's postgresql-15-auto-failover), for the
chaos row's database column: a monitor and two data nodes on this host, the standby synchronous, with
the monitor's health checks and the keepers' timeouts of Tests/TestSupport/PostgresHA.swift (a lost
primary replaced in about 9 s; docs/cluster.md "PostgreSQL highly available"). A node's host can be
killed (its keeper and server at once) and started again, when it rejoins as the standby. Given the
chaos row's network (root), each data node runs on a host of its own (a network namespace), so that
it can also be cut off; the monitor stays on this side. Run as the `postgres` user when root."""
import os, shutil, signal, subprocess, tempfile

AUTOCTL = "/usr/bin/pg_autoctl"


def installed():
    return os.access(AUTOCTL, os.X_OK)


class PostgresHA:
    def __init__(self, free_port, wait_for, network=None, first_host=3):
        if not installed():
            raise SystemExit("tonearm-load: --chaos-database needs pg_auto_failover "
                             "(apt-get install postgresql-15-auto-failover; make deps-test installs it)")
        root = "/usr/lib/postgresql"
        versions = sorted(int(v) for v in os.listdir(root) if v.isdigit()) if os.path.isdir(root) else []
        if not versions:
            raise SystemExit("tonearm-load: the chaos row needs PostgreSQL (apt-get install postgresql)")
        self.bin = f"{root}/{versions[-1]}/bin"
        self.wait_for = wait_for
        self.as_root = os.getuid() == 0
        self.dir = tempfile.mkdtemp(prefix="tonearm-chaos-paf-")
        os.chmod(self.dir, 0o777)
        self.monitor_port = free_port()
        self.ports = [free_port(), free_port()]
        self.keepers = {}
        self.network = network
        nodes = range(first_host, first_host + len(self.ports))
        self.hosts = [network.hosts[i][1] for i in nodes] if network else ["127.0.0.1"] * len(self.ports)
        self.host_indices = list(nodes) if network else []
        self.launchers = [network.launcher(i) for i in nodes] if network else [[]] * len(self.ports)
        monitor_host = network.outside if network else "127.0.0.1"
        self.keep("monitor", ["create", "monitor", "--pgdata", self.data("monitor"), "--pgport", str(self.monitor_port),
                              "--listen", ",".join(sorted({"127.0.0.1", monitor_host}))], hostname=monitor_host)
        wait_for(lambda: self.monitor("SELECT count(*) FROM pgautofailover.node") is not None, 60, "the monitor")
        if network:
            self.trust_subnet(self.data("monitor"))
            self.monitor("SELECT pg_reload_conf()", user="postgres")
        for name, value in (("health_check_period", 1000), ("health_check_timeout", 1000),
                            ("health_check_max_retries", 1), ("health_check_retry_delay", 500),
                            ("node_considered_unhealthy_timeout", 3000), ("primary_demote_timeout", 5000)):
            self.monitor(f"ALTER SYSTEM SET pgautofailover.{name} = {value}", user="postgres")
        self.monitor("SELECT pg_reload_conf()", user="postgres")
        monitor_url = f"postgres://autoctl_node@{monitor_host}:{self.monitor_port}/pg_auto_failover?sslmode=disable"
        for index, port in enumerate(self.ports):
            self.keep(f"node{index}", ["create", "postgres", "--pgdata", self.data(f"node{index}"), "--pgport", str(port),
                                       "--monitor", monitor_url, "--listen", self.hosts[index]],
                      hostname=self.hosts[index], launcher=self.launchers[index])
            wanted = "single" if index == 0 else "secondary"
            wait_for(lambda: self.state(index) == wanted, 90, f"database node {index}")
            self.autoctl(["config", "set", "--pgdata", self.data(f"node{index}"), "timeout.network_partition_timeout", "3"],
                         self.launchers[index])
            if network:
                # The pairs, this side (psql) and the other node reach it from the bridge's subnet.
                self.trust_subnet(self.data(f"node{index}"))
                self.sql(index, "SELECT pg_reload_conf()")
        wait_for(lambda: self.state(0) == "primary", 30, "the database's primary")
        # libpq's form: every node; the Router finds the one that takes writes.
        self.url = "postgres://postgres@" + ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.ports)) + "/postgres"

    def trust_subnet(self, data):
        with open(os.path.join(data, "pg_hba.conf"), "a") as hba:
            hba.write(f"host all all {self.network.outside}/24 trust\nhost replication all {self.network.outside}/24 trust\n")

    def data(self, name):
        return os.path.join(self.dir, name)

    def primary(self):
        """The index of the node that takes writes now, or None."""
        for index in range(len(self.ports)):
            if self.sql(index, "SHOW transaction_read_only") == "off":
                return index
        return None

    def state(self, index):
        return self.monitor(f"SELECT reportedstate FROM pgautofailover.node WHERE nodeport = {self.ports[index]}")

    def kill(self, index):
        """Node `index`'s host dies, as far as this machine can: its keeper and its server at once."""
        self.signal(self.keepers.pop(f"node{index}"), signal.SIGKILL)

    def restart(self, index):
        """Node `index`'s host is back: its keeper runs again and brings the node back as the standby."""
        self.keep(f"node{index}", ["run", "--pgdata", self.data(f"node{index}")], launcher=self.launchers[index], create=False)

    def stop(self):
        for name in reversed(list(self.keepers)):
            self.signal(self.keepers.pop(name), signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def signal(process, number):
        """Signals a keeper and every process under it (its server among them) at once."""
        every = [process.pid]
        index = 0
        while index < len(every):
            try:
                with open(f"/proc/{every[index]}/task/{every[index]}/children") as f:
                    every += [int(pid) for pid in f.read().split()]
            except OSError:
                pass
            index += 1
        for pid in reversed(every):
            try:
                os.kill(pid, number)
            except OSError:
                pass
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def keep(self, name, arguments, hostname="127.0.0.1", launcher=(), create=True):
        """`pg_autoctl …`, kept running (a keeper, or the monitor's) on its host, with its own log."""
        if create:
            arguments = arguments + ["--hostname", hostname, "--auth", "trust", "--no-ssl", "--run"]
        log = open(os.path.join(self.dir, f"{name}.log"), "a")
        self.keepers[name] = subprocess.Popen([*launcher, *self.wrap(arguments)], stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def autoctl(self, arguments, launcher=()):
        subprocess.run([*launcher, *self.wrap(arguments)], check=True, capture_output=True)

    def wrap(self, arguments):
        environment = [f"PATH={self.bin}:/usr/bin:/bin", f"XDG_CONFIG_HOME={self.data('config')}",
                       f"XDG_DATA_HOME={self.data('state')}"]
        command = ["/usr/bin/env", *environment, AUTOCTL, *arguments]
        return ["runuser", "-u", "postgres", "--", *command] if self.as_root else command

    def monitor(self, statement, user="autoctl_node"):
        return self.psql(f"postgres://{user}@127.0.0.1:{self.monitor_port}/pg_auto_failover?connect_timeout=2", statement)

    def sql(self, index, statement):
        return self.psql(f"postgres://postgres@{self.hosts[index]}:{self.ports[index]}/postgres?connect_timeout=1", statement)

    def psql(self, url, statement):
        try:
            done = subprocess.run([f"{self.bin}/psql", url, "-tAq", "-c", statement], capture_output=True, text=True,
                                  timeout=5)
        except subprocess.TimeoutExpired:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    def settle(self, timeout):
        """Waits until one node is the primary and the other its standby again."""
        self.wait_for(lambda: sorted(filter(None, (self.state(i) for i in range(len(self.ports))))) == ["primary", "secondary"],
                      timeout, "the database's two nodes (primary and standby)")
