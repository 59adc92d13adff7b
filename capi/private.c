/*
 * The kernel-ABI helpers librdmacm calls, and IBVERBS_PRIVATE_34: the private symbols
 * rdma-core's provider libraries (libmlx5, libefa, libmlx4, libmana) and librdmacm
 * import with BIND_NOW. Programs such as perftest link libmlx5 and libefa, so these
 * must exist for them to load at all; goverbs has no kernel providers, so each one fails
 * with EOPNOTSUPP (NULL for the two that return objects), and verbs_register_driver_34,
 * which the providers call from their constructors, registers nothing.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>
#include "gv.h"

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;
	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

/*
 * The scalar fields struct ibv_sa_path_rec and struct ib_user_path_rec share, by name:
 * both copies below go through this one list (the GIDs differ in type and are copied
 * apart).
 */
#define GV_PATH_REC_FIELDS(X) \
	X(dlid) \
	X(slid) \
	X(raw_traffic) \
	X(flow_label) \
	X(hop_limit) \
	X(traffic_class) \
	X(reversible) \
	X(numb_path) \
	X(pkey) \
	X(sl) \
	X(mtu_selector) \
	X(mtu) \
	X(rate_selector) \
	X(rate) \
	X(packet_life_time_selector) \
	X(packet_life_time) \
	X(preference)
#define GV_COPY_FIELD(f) dst->f = src->f;

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
	GV_PATH_REC_FIELDS(GV_COPY_FIELD)
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
	GV_PATH_REC_FIELDS(GV_COPY_FIELD)
}

#undef GV_COPY_FIELD
#undef GV_PATH_REC_FIELDS

/* IBVERBS_1.1's ibv_register_driver: the pre-2017 provider registration. */
void ibv_register_driver(const char *name, void *init_func)
{
	(void)name; (void)init_func;
}

bool verbs_allow_disassociate_destroy;

void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}

void *verbs_open_device(void *device, void *private_data)
{
	(void)device; (void)private_data;
	errno = EOPNOTSUPP;
	return NULL;
}

void *_verbs_init_and_alloc_context(void *device, int cmd_fd, size_t alloc_size, void *context_offset,
				    unsigned int driver_id)
{
	(void)device; (void)cmd_fd; (void)alloc_size; (void)context_offset; (void)driver_id;
	errno = EOPNOTSUPP;
	return NULL;
}

int ibv_read_ibdev_sysfs_file(char *buf, size_t size, const char *sysfs_dev, const char *fnfmt, ...)
{
	(void)buf; (void)size; (void)sysfs_dev; (void)fnfmt;
	errno = ENOENT;
	return -1;
}

/* The rest return an int error; none is reachable, since no provider registers. */
#define GV_PRIVATE_STUB(name) int name(void); int name(void) { errno = EOPNOTSUPP; return EOPNOTSUPP; }
GV_PRIVATE_STUB(__ioctl_final_num_attrs)
GV_PRIVATE_STUB(__verbs_log)
GV_PRIVATE_STUB(execute_ioctl)
GV_PRIVATE_STUB(ibv_cmd_advise_mr)
GV_PRIVATE_STUB(ibv_cmd_alloc_dm)
GV_PRIVATE_STUB(ibv_cmd_alloc_mw)
GV_PRIVATE_STUB(ibv_cmd_alloc_pd)
GV_PRIVATE_STUB(ibv_cmd_attach_mcast)
GV_PRIVATE_STUB(ibv_cmd_close_xrcd)
GV_PRIVATE_STUB(ibv_cmd_create_ah)
GV_PRIVATE_STUB(ibv_cmd_create_counters)
GV_PRIVATE_STUB(ibv_cmd_create_cq)
GV_PRIVATE_STUB(ibv_cmd_create_cq_ex)
GV_PRIVATE_STUB(ibv_cmd_create_flow)
GV_PRIVATE_STUB(ibv_cmd_create_flow_action_esp)
GV_PRIVATE_STUB(ibv_cmd_create_qp)
GV_PRIVATE_STUB(ibv_cmd_create_qp_ex)
GV_PRIVATE_STUB(ibv_cmd_create_qp_ex2)
GV_PRIVATE_STUB(ibv_cmd_create_rwq_ind_table)
GV_PRIVATE_STUB(ibv_cmd_create_srq)
GV_PRIVATE_STUB(ibv_cmd_create_srq_ex)
GV_PRIVATE_STUB(ibv_cmd_create_wq)
GV_PRIVATE_STUB(ibv_cmd_dealloc_mw)
GV_PRIVATE_STUB(ibv_cmd_dealloc_pd)
GV_PRIVATE_STUB(ibv_cmd_dereg_mr)
GV_PRIVATE_STUB(ibv_cmd_destroy_ah)
GV_PRIVATE_STUB(ibv_cmd_destroy_counters)
GV_PRIVATE_STUB(ibv_cmd_destroy_cq)
GV_PRIVATE_STUB(ibv_cmd_destroy_flow)
GV_PRIVATE_STUB(ibv_cmd_destroy_flow_action)
GV_PRIVATE_STUB(ibv_cmd_destroy_qp)
GV_PRIVATE_STUB(ibv_cmd_destroy_rwq_ind_table)
GV_PRIVATE_STUB(ibv_cmd_destroy_srq)
GV_PRIVATE_STUB(ibv_cmd_destroy_wq)
GV_PRIVATE_STUB(ibv_cmd_detach_mcast)
GV_PRIVATE_STUB(ibv_cmd_free_dm)
GV_PRIVATE_STUB(ibv_cmd_get_context)
GV_PRIVATE_STUB(ibv_cmd_modify_cq)
GV_PRIVATE_STUB(ibv_cmd_modify_flow_action_esp)
GV_PRIVATE_STUB(ibv_cmd_modify_qp)
GV_PRIVATE_STUB(ibv_cmd_modify_qp_ex)
GV_PRIVATE_STUB(ibv_cmd_modify_srq)
GV_PRIVATE_STUB(ibv_cmd_modify_wq)
GV_PRIVATE_STUB(ibv_cmd_open_qp)
GV_PRIVATE_STUB(ibv_cmd_open_xrcd)
GV_PRIVATE_STUB(ibv_cmd_poll_cq)
GV_PRIVATE_STUB(ibv_cmd_post_recv)
GV_PRIVATE_STUB(ibv_cmd_post_send)
GV_PRIVATE_STUB(ibv_cmd_post_srq_recv)
GV_PRIVATE_STUB(ibv_cmd_query_context)
GV_PRIVATE_STUB(ibv_cmd_query_device_any)
GV_PRIVATE_STUB(ibv_cmd_query_mr)
GV_PRIVATE_STUB(ibv_cmd_query_port)
GV_PRIVATE_STUB(ibv_cmd_query_qp)
GV_PRIVATE_STUB(ibv_cmd_query_srq)
GV_PRIVATE_STUB(ibv_cmd_read_counters)
GV_PRIVATE_STUB(ibv_cmd_reg_dm_mr)
GV_PRIVATE_STUB(ibv_cmd_reg_dmabuf_mr)
GV_PRIVATE_STUB(ibv_cmd_reg_mr)
GV_PRIVATE_STUB(ibv_cmd_req_notify_cq)
GV_PRIVATE_STUB(ibv_cmd_rereg_mr)
GV_PRIVATE_STUB(ibv_cmd_resize_cq)
GV_PRIVATE_STUB(verbs_init_cq)
GV_PRIVATE_STUB(verbs_set_ops)
GV_PRIVATE_STUB(verbs_uninit_context)
