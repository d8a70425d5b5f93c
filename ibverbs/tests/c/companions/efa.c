/* uhca's stand-in for rdma-core's libefa.so.1 (the EFA direct-verbs library).
 *
 * uhca's devices are not EFA devices: the efadv_* entry points a program such as perftest
 * or pyverbs imports answer as rdma-core's libefa does for a device of another provider, EOPNOTSUPP
 * (returned, or NULL with errno set). Written for uhca. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

int efadv_query_device(void *context, void *attr, uint32_t inlen) { return EOPNOTSUPP; }

void *efadv_create_qp_ex(void *context, void *attr_ex, void *efa_attr, uint32_t inlen)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* What pyverbs (rdma-core's Python bindings) imports besides. */
void *efadv_create_driver_qp(void *pd, void *attr, uint32_t driver_qp_type)
{
	errno = EOPNOTSUPP;
	return NULL;
}

int efadv_query_ah(void *ibvah, void *attr, uint32_t inlen) { return EOPNOTSUPP; }

void *efadv_create_cq(void *context, void *attr_ex, void *efa_attr, uint32_t inlen)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* Only a CQ of efadv_create_cq has an EFA side; there are none. */
void *efadv_cq_from_ibv_cq_ex(void *ibvcqx)
{
	errno = EOPNOTSUPP;
	return NULL;
}
