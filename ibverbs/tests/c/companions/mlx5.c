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
