/* NCCL's loading sequence for its InfiniBand transport, on uhca's library: dlopen() of the
 * library's path (what NCCL_IBVERBS_LIB names) with RTLD_NOW, dlvsym() of each of the 22
 * symbols NCCL requires at IBVERBS_1.1 (NCCL 2.30's src/misc/ibvsymbols.cc: one missing and
 * NCCL gives up on the transport) and of its optional ones at their versions, then the
 * first calls of NCCL's device discovery made through those pointers (list, name, open,
 * query_device, query_port, query_gid, fork_init, event_type_str). The program declares
 * none of verbs.h: it sees only what dlvsym hands back, as NCCL does.
 * Prints one PASS or FAIL line per check, one INFO line per optional symbol; exits 1 on a
 * FAIL.   usage: nccl_loading PATH-OF-libibverbs.so.1
 * Written for uhca's tests (ibverbs/tests/nccl_loading.rs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failed;

static void check(int ok, const char *what) {
	printf("%s %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		failed = 1;
}

static const char *required[] = {
	"ibv_get_device_list", "ibv_free_device_list", "ibv_get_device_name", "ibv_open_device",
	"ibv_close_device", "ibv_get_async_event", "ibv_ack_async_event", "ibv_query_device",
	"ibv_query_port", "ibv_query_gid", "ibv_query_qp", "ibv_alloc_pd", "ibv_dealloc_pd",
	"ibv_reg_mr", "ibv_dereg_mr", "ibv_create_cq", "ibv_destroy_cq", "ibv_create_qp",
	"ibv_modify_qp", "ibv_destroy_qp", "ibv_fork_init", "ibv_event_type_str",
};

static const struct { const char *name, *version; } optional[] = {
	{ "ibv_reg_mr_iova2", "IBVERBS_1.8" },  { "ibv_reg_dmabuf_mr", "IBVERBS_1.12" },
	{ "ibv_query_ece", "IBVERBS_1.10" },    { "ibv_set_ece", "IBVERBS_1.10" },
	{ "ibv_query_port_speed", "IBVERBS_1.16" },
};

int main(int argc, char **argv) {
	if (argc < 2) { fprintf(stderr, "usage: %s LIB\n", argv[0]); return 2; }
	void *h = dlopen(argv[1], RTLD_NOW);
	check(h != NULL, "dlopen(NCCL_IBVERBS_LIB, RTLD_NOW)");
	if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	void *sym[sizeof required / sizeof *required];
	for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
		char what[128];
		sym[i] = dlvsym(h, required[i], "IBVERBS_1.1");
		snprintf(what, sizeof what, "dlvsym %s@IBVERBS_1.1", required[i]);
		check(sym[i] != NULL, what);
	}
	for (size_t i = 0; i < sizeof optional / sizeof *optional; i++)
		printf("INFO optional %s@%s: %s\n", optional[i].name, optional[i].version,
		       dlvsym(h, optional[i].name, optional[i].version) ? "found" : "absent");
	if (failed)
		return 1;

	/* NCCL's discovery through the pointers (prototypes reduced to the ABI). */
	void **(*get_list)(int *) = (void **(*)(int *))sym[0];
	void (*free_list)(void **) = (void (*)(void **))sym[1];
	const char *(*get_name)(void *) = (const char *(*)(void *))sym[2];
	void *(*open_dev)(void *) = (void *(*)(void *))sym[3];
	int (*close_dev)(void *) = (int (*)(void *))sym[4];
	int (*query_device)(void *, void *) = (int (*)(void *, void *))sym[7];
	int (*query_port)(void *, uint8_t, void *) = (int (*)(void *, uint8_t, void *))sym[8];
	int (*query_gid)(void *, uint8_t, int, void *) = (int (*)(void *, uint8_t, int, void *))sym[9];
	int (*fork_init)(void) = (int (*)(void))sym[20];
	const char *(*event_str)(int) = (const char *(*)(int))sym[21];

	check(fork_init() == 0, "ibv_fork_init: 0 (mock devices need no fork protection)");
	int n = 0;
	void **list = get_list(&n);
	check(list != NULL && n == 1, "ibv_get_device_list: one device");
	if (!list || n < 1) return 1;
	check(strcmp(get_name(list[0]), "uhca0") == 0, "ibv_get_device_name: uhca0");
	void *ctx = open_dev(list[0]);
	check(ctx != NULL, "ibv_open_device");
	if (!ctx) return 1;
	/* struct ibv_device_attr is 232 bytes, phys_port_cnt its byte at 227; struct
	 * ibv_port_attr 52, state its int at 0 (4: ACTIVE), link_layer its byte at 46 (rdma-core 44). */
	unsigned char attr[232] = { 0 }, port[64] = { 0 }, gid[16] = { 0 };
	check(query_device(ctx, attr) == 0 && attr[227] == 1, "ibv_query_device: one port");
	check(query_port(ctx, 1, port) == 0 && port[0] == 4 && port[46] == 2,
	      "ibv_query_port: port 1 ACTIVE, Ethernet");
	static const unsigned char v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	check(query_gid(ctx, 1, 0, gid) == 0 && memcmp(gid, v4mapped, 12) == 0,
	      "ibv_query_gid: GID 0 the RoCEv2 GID of an IPv4 address");
	check(strcmp(event_str(9), "port active") == 0, "ibv_event_type_str(IBV_EVENT_PORT_ACTIVE)");
	check(close_dev(ctx) == 0, "ibv_close_device");
	free_list(list);
	return failed;
}
