#!/bin/sh
# rdma-core's own test suite on Soft-RoCE (conf/pyverbsrxe.conf): rxe0 on veth0 (10.9.1.1,
# its peer veth1 10.9.1.2 in the same namespace), then guest/tests/pyverbs.sh on rxe0.
# rdma_rxe needs the crc32 crypto modules first (as rxe.sh).
modprobe crc32-pclmul 2>/dev/null; modprobe crc32_generic
for m in veth ib_uverbs rdma_rxe; do modprobe $m || { echo "cannot load $m"; exit 2; }; done
/usr/sbin/ip link add veth0 type veth peer name veth1 || exit 3
/usr/sbin/ip addr add 10.9.1.1/24 dev veth0
/usr/sbin/ip addr add 10.9.1.2/24 dev veth1
/usr/sbin/ip link set veth0 up
/usr/sbin/ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0 || { echo "rdma link add failed"; exit 3; }
ibv_devinfo -d rxe0 | grep -E 'hca_id|state|link_layer'
PYV_DEV=rxe0 exec sh /tests/pyverbs.sh
