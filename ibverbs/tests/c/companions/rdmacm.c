/* uhca's stand-in for rdma-core's librdmacm.so.1 (the RDMA connection manager).
 *
 * uhca has no connection manager (its devices have no kernel rdma_cm behind them): every
 * rdma_* entry point a program such as perftest or pyverbs imports fails with ENOSYS (-1 or NULL and
 * errno set), so a program that asks for rdma_cm (perftest's -R) is told at once, and one
 * that does not never calls it. rdma_event_str names the events, as it does whatever the
 * devices. rdma_create_event_channel, the first call of any rdma_cm user, fails with ENODEV
 * instead, what rdma-core's librdmacm answers on a host without an RDMA CM device (no
 * /dev/infiniband/rdma_cm): UCX then leaves its rdmacm transport out quietly. Written for
 * uhca. */
#include <errno.h>
#include <stddef.h>

#define FAIL_INT { errno = ENOSYS; return -1; }
#define FAIL_PTR { errno = ENOSYS; return NULL; }

void *rdma_create_event_channel(void)
{
	errno = ENODEV;
	return NULL;
}
void rdma_destroy_event_channel(void *channel) { }
int rdma_create_id(void *channel, void **id, void *context, int ps) FAIL_INT
int rdma_destroy_id(void *id) FAIL_INT
int rdma_bind_addr(void *id, void *addr) FAIL_INT
int rdma_resolve_addr(void *id, void *src, void *dst, int timeout_ms) FAIL_INT
int rdma_resolve_route(void *id, int timeout_ms) FAIL_INT
int rdma_create_qp(void *id, void *pd, void *qp_init_attr) FAIL_INT
int rdma_create_qp_ex(void *id, void *qp_init_attr) FAIL_INT
void rdma_destroy_qp(void *id) { }
int rdma_connect(void *id, void *conn_param) FAIL_INT
int rdma_listen(void *id, int backlog) FAIL_INT
int rdma_accept(void *id, void *conn_param) FAIL_INT
int rdma_reject(void *id, const void *private_data, unsigned char private_data_len) FAIL_INT
int rdma_disconnect(void *id) FAIL_INT
int rdma_get_cm_event(void *channel, void **event) FAIL_INT
int rdma_ack_cm_event(void *event) FAIL_INT
int rdma_set_option(void *id, int level, int optname, void *optval, size_t optlen) FAIL_INT
int rdma_getaddrinfo(const char *node, const char *service, const void *hints, void **res)
{
	if (res)
		*res = NULL;
	FAIL_INT
}
/* rdma_getaddrinfo never hands out a list, so there is nothing to free. */
void rdma_freeaddrinfo(void *res) { }

const char *rdma_event_str(int event)
{
	/* The events of enum rdma_cm_event_type, in order. */
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if (event >= 0 && (size_t)event < sizeof names / sizeof names[0])
		return names[event];
	return "UNKNOWN EVENT";
}

/* What pyverbs (rdma-core's Python bindings) imports besides. */
int rdma_create_ep(void **id, void *res, void *pd, void *qp_init_attr) FAIL_INT
void rdma_destroy_ep(void *id) { }
int rdma_get_request(void *listen, void **id) FAIL_INT
int rdma_join_multicast(void *id, void *addr, void *context) FAIL_INT
int rdma_leave_multicast(void *id, void *addr) FAIL_INT
int rdma_join_multicast_ex(void *id, void *mc_join_attr, void *context) FAIL_INT
int rdma_establish(void *id) FAIL_INT
int rdma_init_qp_attr(void *id, void *qp_attr, int *qp_attr_mask) FAIL_INT
int rdma_get_remote_ece(void *id, void *ece) FAIL_INT
int rdma_set_local_ece(void *id, void *ece) FAIL_INT
/* No connection manager, so no device it could list. */
void **rdma_get_devices(int *num_devices)
{
	if (num_devices)
		*num_devices = 0;
	FAIL_PTR
}
void rdma_free_devices(void **list) { }
/* What UCX 1.13's connection-manager transport (libuct_rdmacm) imports besides. */
int rdma_migrate_id(void *id, void *channel) FAIL_INT
/* What libfabric (Open MPI's ofi components load it) imports besides. No rdma_cm id can
 * exist (rdma_create_id fails), so no id has a port: 0, what librdmacm answers for an id
 * without an address. */
unsigned short rdma_get_src_port(void *id) { return 0; }
unsigned short rdma_get_dst_port(void *id) { return 0; }
