/*
 * The C side of goverbs' libibverbs.so.1: the objects a program holds. Each public
 * rdma-core struct (from the installed <infiniband/verbs.h>, never mirrored by hand) is
 * the first member of a goverbs struct that adds the handle of its Go object, so the
 * pointer a program passes back is also ours.
 */
#ifndef GOVERBS_CAPI_GV_H
#define GOVERBS_CAPI_GV_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <infiniband/verbs.h>

/* The longest device list goverbs builds (GOVERBS_DEVICES entries). */
enum { GV_MAX_DEVICES = 32 };

struct gv_device {
	struct ibv_device dev;
	uint64_t guid; /* host order */
};

struct gv_context {
	struct verbs_context vctx; /* the ibv_context programs see is vctx.context */
	uintptr_t h;
	int async_wfd; /* write end of the async event pipe (read end: context.async_fd) */
};

struct gv_pd { struct ibv_pd pd; uintptr_t h; };
struct gv_mr { struct ibv_mr mr; uintptr_t h; };
/*
 * Every CQ is an ibv_cq_ex (whose first fields are an ibv_cq), so that ibv_create_cq_ex
 * and ibv_create_cq make the same object; cur is the completion ibv_start_poll and
 * ibv_next_poll moved out of the CQ for the read_* functions.
 */
struct gv_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx;
	};
	uintptr_t h;
	struct ibv_wc cur;
};
struct gv_srq { struct ibv_srq srq; uintptr_t h; };
struct gv_xrcd { struct ibv_xrcd xrcd; uintptr_t h; };
struct gv_ah { struct ibv_ah ah; uintptr_t h; };
struct gv_mw { struct ibv_mw mw; uintptr_t h; };

struct gv_channel {
	struct ibv_comp_channel ch; /* ch.fd is the read end of a pipe of ibv_cq pointers */
	uintptr_t h;
	int wfd;
};

/*
 * A QP is an ibv_qp_ex, so that ibv_qp_to_qp_ex can hand out the same object; the
 * ibv_wr_* builder keeps the work requests it is given in wrs until wr_complete.
 */
enum { GV_WR_BATCH = 32, GV_WR_SGE = 4 };

struct gv_qp {
	struct ibv_qp_ex qpx;
	uintptr_t h;
	/* the ibv_wr_* batch */
	int nwr;
	int wr_err;
	struct ibv_send_wr wrs[GV_WR_BATCH];
	struct ibv_sge sges[GV_WR_BATCH][GV_WR_SGE];
	/* IBV_SEND_INLINE staging (inline.c); stage is NULL when max_inline is 0 */
	uint32_t max_inline, max_send_sge;
	uint8_t *stage; /* 2 * GV_WR_BATCH slots of max_inline bytes: the post's, then the builder's */
	uintptr_t stage_mr;
	uint32_t stage_lkey;
	pthread_mutex_t stage_mu; /* one post call at a time uses the post's slots */
	struct ibv_send_wr stage_wrs[GV_WR_BATCH];
	struct ibv_sge stage_sges[GV_WR_BATCH];
};

int gv_inline_init(struct gv_qp *q, uintptr_t pd, const struct ibv_qp_cap *cap);
void gv_inline_free(struct gv_qp *q);
int gv_wants_staging(const struct gv_qp *q, const struct ibv_send_wr *wr);
int gv_post_send_staged(struct gv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
void gv_wr_inline(struct gv_qp *q, struct ibv_send_wr *w, size_t n, const struct ibv_data_buf *bufs);
struct ibv_srq *gv_srq_publish(struct gv_srq *s, struct ibv_pd *pd, void *srq_context);

static inline struct gv_context *gv_ctx(struct ibv_context *c)
{
	return (struct gv_context *)((uint8_t *)c - offsetof(struct verbs_context, context));
}

/*
 * gv_forked is set in a child after fork(): the Go runtime does not survive fork
 * (golang/go#15538), so every entry point that needs Go fails there with ENOSYS.
 */
extern int gv_forked;
int gv_fork_guard(void);

/* Offsets into the unions of ibv_send_wr, for the Go side (from the header). */
enum {
	gv_off_imm = offsetof(struct ibv_send_wr, imm_data),
	gv_off_rdma_addr = offsetof(struct ibv_send_wr, wr.rdma.remote_addr),
	gv_off_rdma_rkey = offsetof(struct ibv_send_wr, wr.rdma.rkey),
	gv_off_atomic_addr = offsetof(struct ibv_send_wr, wr.atomic.remote_addr),
	gv_off_atomic_cmp = offsetof(struct ibv_send_wr, wr.atomic.compare_add),
	gv_off_atomic_swap = offsetof(struct ibv_send_wr, wr.atomic.swap),
	gv_off_atomic_rkey = offsetof(struct ibv_send_wr, wr.atomic.rkey),
	gv_off_ud_ah = offsetof(struct ibv_send_wr, wr.ud.ah),
	gv_off_ud_qpn = offsetof(struct ibv_send_wr, wr.ud.remote_qpn),
	gv_off_ud_qkey = offsetof(struct ibv_send_wr, wr.ud.remote_qkey),
	gv_off_xrc_srqn = offsetof(struct ibv_send_wr, qp_type.xrc.remote_srqn),
	gv_off_bind_mw = offsetof(struct ibv_send_wr, bind_mw.mw),
	gv_off_bind_rkey = offsetof(struct ibv_send_wr, bind_mw.rkey),
	gv_off_bind_info = offsetof(struct ibv_send_wr, bind_mw.bind_info),
	gv_off_wc_imm = offsetof(struct ibv_wc, imm_data),
	gv_off_gid = offsetof(struct ibv_global_route, dgid),
};

#endif
