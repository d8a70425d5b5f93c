/* uhca's stand-in for rdma-core's libmlx5.so.1 (the mlx5 direct-verbs library).
 *
 * uhca's devices are not libmlx5's: every mlx5dv_* entry point a program such as perftest
 * imports answers as rdma-core's libmlx5 does for a device of another provider, EOPNOTSUPP
 * (NULL with errno set, or the errno returned), never a silent success. Written for uhca;
 * the prototypes are reduced to what the ABI needs (pointers and integers). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define REFUSE_PTR { errno = EOPNOTSUPP; return NULL; }

void *mlx5dv_open_device(void *device, void *attr) REFUSE_PTR
void *mlx5dv_create_qp(void *context, void *qp_attr, void *mlx5_qp_attr) REFUSE_PTR
void *mlx5dv_qp_ex_from_ibv_qp_ex(void *qp) REFUSE_PTR
void *mlx5dv_create_mkey(void *mkey_init_attr) REFUSE_PTR
void *mlx5dv_dek_create(void *context, void *init_attr) REFUSE_PTR
int mlx5dv_destroy_mkey(void *mkey) { return EOPNOTSUPP; }
int mlx5dv_dek_destroy(void *dek) { return EOPNOTSUPP; }
int mlx5dv_crypto_login(void *context, void *login_attr) { return EOPNOTSUPP; }
int mlx5dv_devx_general_cmd(void *context, const void *in, size_t inlen, void *out,
                            size_t outlen) { return EOPNOTSUPP; }
/* Not imported by perftest, but the first question a direct-verbs program asks. */
_Bool mlx5dv_is_supported(void *device) { return 0; }

/* What pyverbs (rdma-core's Python bindings) imports besides: its mlx5 modules load with
 * the suite's helpers whatever the device. */
int _mlx5dv_mkey_check(void *mkey, void *err_info, uint64_t err_info_size) { return EOPNOTSUPP; }
int _mlx5dv_query_port(void *context, uint64_t port_num, void *info, uint64_t info_len) { return EOPNOTSUPP; }
void *mlx5dv_alloc_var(void *context, uint64_t flags) REFUSE_PTR
void *mlx5dv_create_cq(void *context, void *cq_attr, void *mlx5_cq_attr) REFUSE_PTR
void *mlx5dv_create_flow(void *matcher, void *match_value, uint64_t num_actions, void *actions_attr) REFUSE_PTR
void *mlx5dv_create_flow_action_packet_reformat(void *ctx, uint64_t data_sz, void *data, uint64_t reformat_type, uint64_t ft_type) REFUSE_PTR
void *mlx5dv_create_flow_matcher(void *context, void *matcher_attr) REFUSE_PTR
void *mlx5dv_crypto_login_create(void *context, void *login_attr) REFUSE_PTR
int mlx5dv_crypto_login_destroy(void *crypto_login) { return EOPNOTSUPP; }
int mlx5dv_crypto_login_query(void *crypto_login, void *query_attr) { return EOPNOTSUPP; }
int mlx5dv_crypto_login_query_state(void *context, void *state) { return EOPNOTSUPP; }
int mlx5dv_crypto_logout(void *context) { return EOPNOTSUPP; }
int mlx5dv_dci_stream_id_reset(void *qp, uint64_t stream_id) { return EOPNOTSUPP; }
int mlx5dv_dek_query(void *dek, void *attr) { return EOPNOTSUPP; }
int mlx5dv_destroy_flow_matcher(void *matcher) { return EOPNOTSUPP; }
void *mlx5dv_devx_alloc_msi_vector(void *ibctx) REFUSE_PTR
void *mlx5dv_devx_alloc_uar(void *context, uint64_t flags) REFUSE_PTR
void *mlx5dv_devx_create_eq(void *ibctx, void *in, uint64_t inlen, void *out, uint64_t outlen) REFUSE_PTR
int mlx5dv_devx_destroy_eq(void *eq) { return EOPNOTSUPP; }
int mlx5dv_devx_free_msi_vector(void *msi) { return EOPNOTSUPP; }
void mlx5dv_devx_free_uar(void *devx_uar) { }
void *mlx5dv_devx_obj_create(void *context, void *in, uint64_t inlen, void *out, uint64_t outlen) REFUSE_PTR
int mlx5dv_devx_obj_destroy(void *obj) { return EOPNOTSUPP; }
int mlx5dv_devx_obj_modify(void *obj, void *in, uint64_t inlen, void *out, uint64_t outlen) { return EOPNOTSUPP; }
int mlx5dv_devx_obj_query(void *obj, void *in, uint64_t inlen, void *out, uint64_t outlen) { return EOPNOTSUPP; }
int mlx5dv_devx_query_eqn(void *context, uint64_t vector, void *eqn) { return EOPNOTSUPP; }
int mlx5dv_devx_umem_dereg(void *umem) { return EOPNOTSUPP; }
void *mlx5dv_devx_umem_reg(void *ctx, void *addr, uint64_t size, uint64_t access) REFUSE_PTR
void *mlx5dv_devx_umem_reg_ex(void *ctx, void *umem_in) REFUSE_PTR
void *mlx5dv_dm_map_op_addr(void *dm, uint64_t op) REFUSE_PTR
void *mlx5dv_dr_action_create_default_miss(void) REFUSE_PTR
void *mlx5dv_dr_action_create_dest_array(void *domain, uint64_t num_dest, void *dests) REFUSE_PTR
void *mlx5dv_dr_action_create_dest_devx_tir(void *devx_obj) REFUSE_PTR
void *mlx5dv_dr_action_create_dest_ib_port(void *domain, uint64_t ib_port) REFUSE_PTR
void *mlx5dv_dr_action_create_dest_ibv_qp(void *ibqp) REFUSE_PTR
void *mlx5dv_dr_action_create_dest_table(void *table) REFUSE_PTR
void *mlx5dv_dr_action_create_dest_vport(void *domain, uint64_t vport) REFUSE_PTR
void *mlx5dv_dr_action_create_drop(void) REFUSE_PTR
void *mlx5dv_dr_action_create_flow_counter(void *devx_obj, uint64_t offset) REFUSE_PTR
void *mlx5dv_dr_action_create_flow_sampler(void *attr) REFUSE_PTR
void *mlx5dv_dr_action_create_modify_header(void *domain, uint64_t flags, uint64_t actions_sz, void *actions) REFUSE_PTR
void *mlx5dv_dr_action_create_packet_reformat(void *domain, uint64_t flags, uint64_t reformat_type, uint64_t data_sz, void *data) REFUSE_PTR
void *mlx5dv_dr_action_create_pop_vlan(void) REFUSE_PTR
void *mlx5dv_dr_action_create_push_vlan(void *domain, uint64_t vlan_hdr) REFUSE_PTR
void *mlx5dv_dr_action_create_tag(uint64_t tag_value) REFUSE_PTR
int mlx5dv_dr_action_destroy(void *action) { return EOPNOTSUPP; }
void mlx5dv_dr_domain_allow_duplicate_rules(void *domain, uint64_t allow) { }
void *mlx5dv_dr_domain_create(void *ctx, uint64_t type) REFUSE_PTR
int mlx5dv_dr_domain_destroy(void *domain) { return EOPNOTSUPP; }
int mlx5dv_dr_domain_sync(void *domain, uint64_t flags) { return EOPNOTSUPP; }
void *mlx5dv_dr_matcher_create(void *table, uint64_t priority, uint64_t match_criteria_enable, void *mask) REFUSE_PTR
int mlx5dv_dr_matcher_destroy(void *matcher) { return EOPNOTSUPP; }
int mlx5dv_dr_matcher_set_layout(void *matcher, void *layout) { return EOPNOTSUPP; }
void *mlx5dv_dr_rule_create(void *matcher, void *value, uint64_t num_actions, void *actions) REFUSE_PTR
int mlx5dv_dr_rule_destroy(void *rule) { return EOPNOTSUPP; }
void *mlx5dv_dr_table_create(void *domain, uint64_t level) REFUSE_PTR
int mlx5dv_dr_table_destroy(void *table) { return EOPNOTSUPP; }
int mlx5dv_dump_dr_domain(void *fout, void *domain) { return EOPNOTSUPP; }
void mlx5dv_free_var(void *dv_var) { }
int mlx5dv_get_clock_info(void *context, void *clock_info) { return EOPNOTSUPP; }
void *mlx5dv_get_vfio_device_list(void *attr) REFUSE_PTR
int mlx5dv_init_obj(void *obj, uint64_t obj_type) { return EOPNOTSUPP; }
int mlx5dv_map_ah_to_qp(void *ah, uint64_t qp_num) { return EOPNOTSUPP; }
int mlx5dv_modify_qp_lag_port(void *qp, uint64_t port_num) { return EOPNOTSUPP; }
int mlx5dv_modify_qp_sched_elem(void *qp, void *requestor, void *responder) { return EOPNOTSUPP; }
int mlx5dv_modify_qp_udp_sport(void *qp, uint64_t udp_sport) { return EOPNOTSUPP; }
void *mlx5dv_pp_alloc(void *context, uint64_t pp_context_sz, void *pp_context, uint64_t flags) REFUSE_PTR
void mlx5dv_pp_free(void *pp) { }
int mlx5dv_qp_cancel_posted_send_wrs(void *mqp, uint64_t wr_id) { return EOPNOTSUPP; }
int mlx5dv_query_device(void *ctx_in, void *attrs_out) { return EOPNOTSUPP; }
int mlx5dv_query_qp_lag_port(void *qp, void *port_num, void *active_port_num) { return EOPNOTSUPP; }
int mlx5dv_reserved_qpn_alloc(void *ctx, void *qpn) { return EOPNOTSUPP; }
int mlx5dv_reserved_qpn_dealloc(void *ctx, uint64_t qpn) { return EOPNOTSUPP; }
void *mlx5dv_sched_leaf_create(void *context, void *sched_attr) REFUSE_PTR
int mlx5dv_sched_leaf_destroy(void *leaf) { return EOPNOTSUPP; }
int mlx5dv_sched_leaf_modify(void *leaf, void *sched_attr) { return EOPNOTSUPP; }
void *mlx5dv_sched_node_create(void *context, void *sched_attr) REFUSE_PTR
int mlx5dv_sched_node_destroy(void *node) { return EOPNOTSUPP; }
int mlx5dv_sched_node_modify(void *node, void *sched_attr) { return EOPNOTSUPP; }
int mlx5dv_vfio_get_events_fd(void *ibctx) { return EOPNOTSUPP; }
int mlx5dv_vfio_process_events(void *context) { return EOPNOTSUPP; }

/* What UCX 1.13's InfiniBand transports (libuct_ib) import besides: it asks
 * mlx5dv_is_supported first and, told no, uses plain verbs. */
void *mlx5dv_devx_create_event_channel(void *context, uint64_t flags) REFUSE_PTR
void mlx5dv_devx_destroy_event_channel(void *event_channel) { }
int mlx5dv_devx_subscribe_devx_event(void *event_channel, void *obj, uint64_t events_sz,
                                     void *events_num, uint64_t cookie) { return EOPNOTSUPP; }
long mlx5dv_devx_get_event(void *event_channel, void *event_data, size_t event_resp_len)
{
	errno = EOPNOTSUPP;
	return -1;
}
int mlx5dv_devx_qp_modify(void *qp, const void *in, size_t inlen, void *out, size_t outlen) { return EOPNOTSUPP; }
int mlx5dv_devx_qp_query(void *qp, const void *in, size_t inlen, void *out, size_t outlen) { return EOPNOTSUPP; }
