/*
 * mlx5vfio: rdma-core's own VFIO driver for ConnectX (libmlx5's "mlx5_vfio" provider,
 * NVIDIA's user-space code) on a function bound to vfio-pci: it brings the function up
 * from user space as uhca's --device path does, then allocates a PD and registers a
 * memory region (an MTT memory key), frees them and closes (teardown). The VM rig's
 * vfiouser test runs it on a mock function of its own, so that the server's command dump
 * holds a third driver's commands beside uhca's (tests/vm/linux-vs-uhca.sh).
 *
 * usage: mlx5vfio PCI-ADDRESS        one PASS/FAIL line per step; exit status 0 if all pass
 */
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	struct mlx5dv_vfio_context_attr attr;
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	size_t len = 1 << 16;
	void *buf;
	int fail = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: mlx5vfio PCI-ADDRESS\n");
		return 2;
	}
	memset(&attr, 0, sizeof(attr));
	attr.pci_name = argv[1];
	list = mlx5dv_get_vfio_device_list(&attr);
	if (!list || !list[0]) {
		perror("FAIL mlx5vfio: mlx5dv_get_vfio_device_list");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx) {
		perror("FAIL mlx5vfio: ibv_open_device (bring-up)");
		ibv_free_device_list(list);
		return 1;
	}
	printf("PASS mlx5vfio: ibv_open_device on %s (bring-up by rdma-core's VFIO provider)\n",
	       argv[1]);
	pd = ibv_alloc_pd(ctx);
	if (!pd) {
		perror("FAIL mlx5vfio: ibv_alloc_pd");
		fail = 1;
		goto close;
	}
	printf("PASS mlx5vfio: ibv_alloc_pd\n");
	buf = aligned_alloc(4096, len);
	if (!buf) {
		perror("FAIL mlx5vfio: aligned_alloc");
		fail = 1;
		goto pd;
	}
	memset(buf, 0x5a, len);
	mr = ibv_reg_mr(pd, buf, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ);
	if (!mr) {
		perror("FAIL mlx5vfio: ibv_reg_mr");
		fail = 1;
	} else {
		printf("PASS mlx5vfio: ibv_reg_mr of %zu bytes (lkey 0x%x)\n", len, mr->lkey);
		if (ibv_dereg_mr(mr)) {
			perror("FAIL mlx5vfio: ibv_dereg_mr");
			fail = 1;
		} else {
			printf("PASS mlx5vfio: ibv_dereg_mr\n");
		}
	}
	free(buf);
pd:
	if (pd) {
		if (ibv_dealloc_pd(pd)) {
			perror("FAIL mlx5vfio: ibv_dealloc_pd");
			fail = 1;
		} else {
			printf("PASS mlx5vfio: ibv_dealloc_pd\n");
		}
	}
close:
	if (ibv_close_device(ctx)) {
		perror("FAIL mlx5vfio: ibv_close_device (teardown)");
		fail = 1;
	} else {
		printf("PASS mlx5vfio: ibv_close_device (teardown)\n");
	}
	ibv_free_device_list(list);
	return fail;
}
