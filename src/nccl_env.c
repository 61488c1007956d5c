/* What linkpass does with each variable NCCL's IB transport reads. */
#include "nccl_env.h"

#include <stdio.h>
#include <string.h>

#define H LP_ENV_HONOURED
#define M LP_ENV_MAPPED
#define NA LP_ENV_NOT_APPLICABLE

/* Taken from NCCL's NCCL_PARAM(Ib...) and ncclGetEnv("NCCL_IB...") reads in
 * src/transport/net_ib/ and src/misc/ibv*.cc, 2.28.3 to 2.30.7.  The text
 * completes "NAME=value: <treatment>: ..." in the log. */
const struct lp_nccl_var lp_nccl_vars[] = {
    {"NCCL_IB_DISABLE", H, "0", "a non-zero value makes linkpass offer no devices, so NCCL falls back to another net"},
    {"NCCL_IB_HCA", H, "(all)", "selects the ports linkpass uses, with NCCL's [^][=]name[:port] syntax"},
    {"NCCL_IB_GID_INDEX", H, "-1", "GID index on RoCE; -1 chooses automatically"},
    {"NCCL_IB_ADDR_FAMILY", H, "AF_INET", "address family the automatic RoCE GID choice looks for"},
    {"NCCL_IB_ADDR_RANGE", H, "(unset)", "only GIDs in this subnet are candidates for the automatic RoCE GID choice"},
    {"NCCL_IB_ROCE_VERSION_NUM", H, "2", "RoCE version preferred by the automatic GID choice"},
    {"NCCL_IB_TC", H, "-1 (0)", "traffic class of every QP (NCCL's per-communicator class overrides it)"},
    {"NCCL_IB_FIFO_TC", H, "-1", "traffic class of the receiver's QPs, which carry the clear-to-sends (RoCE)"},
    {"NCCL_IB_SL", H, "-1 (0)", "service level of every QP"},
    {"NCCL_IB_PKEY", H, "0", "P_Key table index of every QP"},
    {"NCCL_IB_TIMEOUT", H, "20", "local ACK timeout of every QP (the watchdog and moves do not wait for it)"},
    {"NCCL_IB_RETRY_CNT", H, "7", "transport retry count of every QP"},
    {"NCCL_IB_QPS_PER_CONNECTION", H, "1", "QPs per connection (linkpass accepts 1..16)"},
    {"NCCL_IBVERBS_LIB", H, "(unset)", "tried before libibverbs.so and libibverbs.so.1"},
    {"NCCL_IB_USE_INLINE", H, "0",
     "1: clear-to-sends of up to 4 sub-receives are posted with IBV_SEND_INLINE from QPs created with room for them"},
    {"NCCL_IB_PCI_RELAXED_ORDERING", H, "2",
     "data registrations take IBV_ACCESS_RELAXED_ORDERING through ibv_reg_mr_iova2 (1: on, WARN if the library "
     "lacks it; 2: where it has it; 0: off); control memory never does"},
    {"NCCL_IB_ADAPTIVE_ROUTING", H, "-2 (on for IB)",
     "on (the default on InfiniBand ports): a one-QP message above NCCL_IB_AR_THRESHOLD goes as RDMA WRITEs plus a "
     "final WRITE_WITH_IMM instead of one WRITE_WITH_IMM"},
    {"NCCL_IB_AR_THRESHOLD", H, "8192", "the size above which adaptive routing splits a message (negative: 8192)"},
    {"NCCL_IB_DEVICE_PCI_ORDER", H, "1",
     "1: devices are numbered in their NICs' PCI address order, the same on every node; 0: libibverbs order"},
    {"NCCL_IB_ECE_ENABLE", H, "1",
     "both ends offer their QPs' ECE (ibv_query_ece) and each QP takes the peer's offer (ibv_set_ece) before RTR"},
    {"NCCL_IB_SUBNET_AWARE_ROUTING", H, "0",
     "1: a RoCE listener's handle carries its GID, and the connector uses a device on that IPv4 subnet when the one "
     "NCCL chose is not"},
    {"NCCL_IB_SUBNET_PREFIX_LEN", H, "24", "the IPv4 prefix length of that subnet check (1..32)"},
    {"NCCL_GDR_FLUSH_DISABLE", H, "0",
     "1: iflush of GPU memory returns at once, without the 1-byte RDMA READ through the NIC that wrote it"},
    {"NCCL_IB_SPLIT_DATA_ON_QPS", M, "0",
     "linkpass always splits each message over all QPs of the connection (NCCL's 1), so that messages complete in "
     "order, which its exactly-once replay after a move relies on; with one QP, the default, both are the same"},
    {"NCCL_IB_RETURN_ASYNC_EVENTS", M, "1",
     "linkpass acts on fatal async events itself: the connections on that NIC move to another one"},
    {"NCCL_IB_RESILIENCY_PORT_FAILOVER", M, "0",
     "linkpass's own failover moves connections between the NICs of its pool and is on by default; "
     "LINKPASS_FAILOVER=0 turns it off"},
    {"NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS", M, "1",
     "linkpass replays a failed message on every healthy NIC in turn, as long as one remains"},
    {"NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY", M, "10",
     "linkpass moves at once on a port event or error completion, and after LINKPASS_WATCHDOG_MS of no progress"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY", M, "0",
     "linkpass fails back automatically after LINKPASS_FAILBACK_HOLDDOWN_MS (flap damping up to "
     "LINKPASS_FAILBACK_HOLDDOWN_MAX_MS) and never gives up"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY", M, "200", "see LINKPASS_FAILBACK_HOLDDOWN_MS"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL", M, "500",
     "linkpass probes a recovered port through its port state, not alive messages"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE", M, "5",
     "linkpass probes a recovered port through its port state, not alive messages (NCCL itself never reads it)"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE", M, "5",
     "linkpass probes a recovered port through its port state, not alive messages"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT", M, "4000", "see LINKPASS_FAILBACK_HOLDDOWN_MS"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT", M, "5000", "see LINKPASS_FAILBACK_HOLDDOWN_MS"},
    {"NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX", M, "5", "linkpass never stops failing back"},
    {"NCCL_IB_MQP_RETRY_ALL", M, "0",
     "linkpass does not retry ibv_modify_qp: a NIC that refuses is skipped and the next one is tried"},
    {"NCCL_IB_MQP_RETRY_CNT", M, "34",
     "linkpass does not retry ibv_modify_qp: a NIC that refuses is skipped and the next one is tried"},
    {"NCCL_IB_MQP_RETRY_SLEEP_MSEC", M, "100",
     "linkpass does not retry ibv_modify_qp: a NIC that refuses is skipped and the next one is tried"},
    {"NCCL_IB_QUERY_PORT_SPEED", M, "1", "linkpass computes the speed from the port's active speed and width"},
    {"NCCL_IB_MERGE_NICS", NA, "1", "linkpass offers no virtual NICs (no makeVDevice)"},
    {"NCCL_IB_MERGE_VFS", NA, "1", "linkpass reports each NIC's own PCI path; it merges no functions"},
    {"NCCL_IB_WARN_RAIL_LOCAL", NA, "0", "only for virtual NICs, which linkpass does not offer"},
    {"NCCL_IB_DATA_DIRECT", NA, "1", "linkpass offers no mlx5 data-direct devices"},
    {"NCCL_IB_OOO_RQ", NA, "0", "linkpass does not use the mlx5 out-of-order receive queue"},
    {"NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME", NA, "-2 (by index)",
     "linkpass's wire protocol numbers every message; both ends are linkpass"},
    {"NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS", NA, "-2 (off)",
     "linkpass posts receives in irecv and re-posts them itself when a connection moves"},
    {"NCCL_IB_ROUTABLE_FLID_GID_INDEX", NA, "1", "linkpass routes InfiniBand by LID, within one subnet"},
};

const size_t lp_nccl_nvars = sizeof(lp_nccl_vars) / sizeof(lp_nccl_vars[0]);

const char *lp_env_treatment_str(enum lp_env_treatment t) {
  switch (t) {
  case LP_ENV_HONOURED: return "honoured";
  case LP_ENV_MAPPED: return "mapped";
  case LP_ENV_NOT_APPLICABLE: return "not applicable";
  }
  return "?";
}

void lp_nccl_env_report(lp_env_fn env, void *env_arg, lp_diag_fn info, void *arg) {
  char line[512];
  for (size_t i = 0; i < lp_nccl_nvars; i++) {
    const struct lp_nccl_var *v = &lp_nccl_vars[i];
    const char *s = env(env_arg, v->name);
    if (s == NULL || *s == '\0') continue; /* empty means unset, as in NCCL */
    /* the value is bounded for the log: a hostile variable cannot blow it up */
    snprintf(line, sizeof(line), "%s=\"%.64s\": %s: %s", v->name, s, lp_env_treatment_str(v->treatment), v->linkpass);
    if (info) info(arg, line);
  }
}
