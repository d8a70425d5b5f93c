/* Data symbols libmlx5's qp.c, cq.c, srq.c and verbs.c take from the rest of rdma-core,
 * with the values a default run of the library has. Functions the harnesses never reach
 * get generated, aborting stand-ins (tests/parity/build.sh); functions a harness needs to
 * behave are defined in that harness. Every definition here is weak, so a harness may
 * define one of these itself. */
#include <stdbool.h>

#define WEAK __attribute__((weak))

/* mlx5.c: MLX5_FREEZE_ON_ERROR_CQE, a debugging knob read from the environment; off. */
WEAK int mlx5_freeze_on_error_cqe;

/* libibverbs (driver.h): whether objects may be destroyed after the device disassociated;
 * read only on destroy paths the harnesses do not take. */
WEAK bool verbs_allow_disassociate_destroy;
