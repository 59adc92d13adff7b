//go:build ibverbs

// shim.h: the few C helpers the Go side needs around libibverbs, where a Go call cannot
// reach (function-like macros, unions) or where one cgo call should do a whole batch.
#ifndef GOVERBS_SHIM_H
#define GOVERBS_SHIM_H

#include <stdint.h>
#include <infiniband/verbs.h>

// gv_send_wr is a send work request without unions or list links: the Go side fills an
// array of them in C memory owned by the QP, and gv_post_send turns the array into an
// ibv_send_wr list in one call.
struct gv_send_wr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint64_t bind_addr;
	uint64_t bind_length;
	struct ibv_ah *ah;
	struct ibv_mw *mw;
	struct ibv_mr *bind_mr;
	uint32_t opcode;
	uint32_t send_flags;
	uint32_t imm; // host order; the immediate data or the rkey to invalidate
	uint32_t rkey;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t num_sge;
	uint32_t bind_access;
	uint32_t bind_rkey;
	uint32_t remote_srqn; // XRC_SEND: the target's XRC SRQ
};

int gv_post_send(struct ibv_qp *qp, const struct gv_send_wr *in, int n, struct ibv_send_wr *wrs,
		 struct ibv_sge *sges, int max_sge, int *bad);
int gv_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, struct ibv_recv_wr *wrs, int n,
		 struct ibv_sge *sges, int max_sge, int *bad);
// gv_wc is a work completion in the layout of Go's driver.WC (cq.go checks it when
// compiling), so that gv_poll_cq writes the caller's completions in place: no union, imm
// in host order (the immediate data or the invalidated rkey, as wc_flags say), status and
// opcode in a byte each (every ibv_wc_status and ibv_wc_opcode value fits).
struct gv_wc {
	uint64_t wr_id;
	uint8_t status;
	uint8_t opcode;
	uint16_t pad;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags; // only GRH, WITH_IMM and WITH_INV, the flags driver.WC defines
	uint32_t vendor_err;
};

// gv_poll_cq polls up to n completions into scratch and converts them into out.
// kernel_flags says the provider hands over the kernel's IB_WC_* flag values unconverted
// (rxe does: its user CQ holds the kernel's struct ib_uverbs_wc, copied as it is), where
// the kernel's WITH_INVALIDATE is 1<<2, libibverbs' IP_CSUM_OK; libibverbs' WITH_INV is 1<<3.
int gv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *scratch, struct gv_wc *out, int kernel_flags);
int gv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
uint64_t gv_device_guid(struct ibv_device *dev);
uint64_t gv_be64(uint64_t v);
int gv_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id, unsigned int flags,
	       struct ibv_mr *mr, uint64_t addr, uint64_t length, unsigned int access,
	       uint32_t *rkey);
int gv_set_ah(struct ibv_ah_attr *ah, const uint8_t *dgid, uint8_t sgid_index, uint8_t hop_limit,
	      uint8_t traffic_class, uint32_t flow_label, uint8_t sl, uint8_t port);
// XRC (the verbs are static inline in <infiniband/verbs.h>, through verbs_context).
struct ibv_xrcd *gv_open_xrcd(struct ibv_context *ctx, int fd, int oflags);
int gv_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_srq *gv_create_xrc_srq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_xrcd *xrcd,
				  struct ibv_cq *cq, struct ibv_srq_attr *attr);
int gv_get_srq_num(struct ibv_srq *srq, uint32_t *num);
struct ibv_qp *gv_create_xrc_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_xrcd *xrcd,
				struct ibv_cq *send_cq, struct ibv_qp_cap *cap, int sq_sig_all);
int gv_async_event(struct ibv_context *ctx, struct ibv_async_event *ev, void **obj, int *port);

#endif
