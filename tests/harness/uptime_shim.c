/* LD_PRELOAD shim for the fake cloud nodes of tests/harness/cloud_nodes.py.
 *
 * slurmctld ignores a node registration whose boot time (now - uptime) lies before the power-up request
 * ("Still waiting for boot of node"): on one host every fake node shares the host's uptime, so this shim
 * makes sysinfo() report uptime = seconds since the process loaded it, i.e. each slurmd "booted" when it
 * started.  Everything else sysinfo() returns is the host's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/sysinfo.h>
#include <time.h>

static time_t loaded_at;

__attribute__((constructor)) static void remember_start(void) { loaded_at = time(NULL); }

int sysinfo(struct sysinfo *info) {
    static int (*host_sysinfo)(struct sysinfo *);
    if (host_sysinfo == NULL) host_sysinfo = (int (*)(struct sysinfo *))dlsym(RTLD_NEXT, "sysinfo");
    int rc = host_sysinfo(info);
    if (rc == 0) info->uptime = (long)(time(NULL) - loaded_at);
    return rc;
}
