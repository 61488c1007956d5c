/*
 * simverbs: a simulated host's sysfs tree at /sys (the `simverbs` tool only;
 * the library never links this).
 *
 * Programs that read /sys/class/infiniband by absolute path (NCCL's own
 * transport, NVIDIA's reference IB plugin) find nothing on a machine without
 * RDMA hardware, and sysfs does not let anyone add the entries.  So `simverbs
 * run` shows the host's tree there, in a mount namespace of the program's
 * own, built from bind mounts:
 *
 *   /sys/class/infiniband, /sys/class/infiniband_verbs   the simulated ones only
 *   /sys/devices/pci0000:00/<pci>                          each NIC's PCI directory
 *   /sys/kernel/mm/memory_peers/nv_mem                     GPU peer memory, on a host
 *                                                          with `peer_memory on`
 *   everything else                                        the real sysfs
 *
 * A directory that must gain entries sysfs lacks (/sys/class, usually
 * /sys/devices/pci0000:00) is covered by a read-only tmpfs that holds each
 * real entry again (a bind mount of it, or the same symlink) and the
 * simulated ones.  Simulated directories are bound whole and read-only, so a
 * file `simverbs link` renames into place is seen at once.
 */
#ifndef SIMVERBS_SYSVIEW_H
#define SIMVERBS_SYSVIEW_H

#include <stdbool.h>
#include <stddef.h>

/* Show the tree rooted at `sim_root` (<run_dir>/<host>/sys) at /sys for the
 * calling single-threaded process and what it executes.  When
 * `private_ns` is false it first makes a mount namespace of its own, with
 * nothing propagating back (as sv_netns_enter does); when true the caller
 * already did.  Returns 0; -1 when the view could not be built (then `why`
 * says what failed and /sys is as it was); -2 when, on top of that, what had
 * been mounted could not all be removed again. */
int sv_sysview_enter(const char *sim_root, bool private_ns, char *why, size_t why_len);

#endif
