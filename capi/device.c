/*
 * Devices and contexts: ibv_get_device_list ... ibv_close_device, the port and GID
 * queries, async events, and the tables through which the static inline verbs of
 * <infiniband/verbs.h> reach goverbs (context->ops and verbs_context).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include "gv.h"
#include "gv_exports.h"

int gv_forked;

#ifdef GOVERBS_ATTACH
/*
 * The C flavour survives fork(): a child's copies of its parent's contexts fail with
 * EIO (capi/attach/gva_conn.c), and the child may open the device anew.
 */
int gv_fork_guard(void)
{
	return 0;
}
#else
static void gv_child_after_fork(void) { gv_forked = 1; }

__attribute__((constructor)) static void gv_init(void)
{
	pthread_atfork(NULL, NULL, gv_child_after_fork);
}

int gv_fork_guard(void)
{
	static int warned;

	if (!gv_forked)
		return 0;
	if (!warned) {
		warned = 1;
		fprintf(stderr, "goverbs: verbs are not available in a child process after fork() "
				"(the Go runtime does not survive fork; golang/go#15538)\n");
	}
	errno = ENOSYS;
	return 1;
}
#endif

/* The device list is read once per process: an opened device must outlive the lists. */
static pthread_mutex_t gv_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gv_device gv_devs[GV_MAX_DEVICES];
static int gv_ndevs = -1;

static int gv_load_devices(void)
{
	char names[GV_MAX_DEVICES][IBV_SYSFS_NAME_MAX];
	uint64_t guids[GV_MAX_DEVICES];
	int i, n;

	n = gv_devices(&names[0][0], IBV_SYSFS_NAME_MAX, guids, GV_MAX_DEVICES);
	if (n < 0)
		return -1;
	for (i = 0; i < n; i++) {
		struct ibv_device *d = &gv_devs[i].dev;

		memset(d, 0, sizeof(*d));
		d->node_type = IBV_NODE_CA;
		d->transport_type = IBV_TRANSPORT_IB;
		snprintf(d->name, sizeof(d->name), "%s", names[i]);
		snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", i);
		/* No sysfs behind a software device: paths that name nothing real. */
		snprintf(d->dev_path, sizeof(d->dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/sys/class/infiniband/%s", names[i]);
		gv_devs[i].guid = guids[i];
	}
	gv_ndevs = n;
	return 0;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list;
	int i, n;

	if (num_devices)
		*num_devices = 0;
	if (gv_fork_guard())
		return NULL;
	pthread_mutex_lock(&gv_list_lock);
	if (gv_ndevs < 0 && gv_load_devices() < 0) {
		pthread_mutex_unlock(&gv_list_lock);
		errno = EINVAL;
		return NULL;
	}
	n = gv_ndevs;
	pthread_mutex_unlock(&gv_list_lock);
	list = calloc(n + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < n; i++)
		list[i] = &gv_devs[i].dev;
	if (num_devices)
		*num_devices = n;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	return device->name;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	if (!device)
		return 0;
	return htobe64(((struct gv_device *)device)->guid);
}

int ibv_get_device_index(struct ibv_device *device)
{
	if (!device)
		return -1;
	return (int)((struct gv_device *)device - gv_devs);
}

/* The ops the static inline verbs call (objects.c, qp.c). */
int gv_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int gv_op_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int gv_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int gv_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int gv_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_qp *gv_op_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_mw *gv_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int gv_op_dealloc_mw(struct ibv_mw *mw);
int gv_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
struct ibv_cq_ex *gv_op_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
struct ibv_xrcd *gv_op_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr);
int gv_op_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_srq *gv_op_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
int gv_op_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);

static int gv_op_query_port(struct ibv_context *context, uint8_t port_num,
			    struct ibv_port_attr *port_attr, size_t port_attr_len);
static int gv_op_query_device_ex(struct ibv_context *context,
				 const struct ibv_query_device_ex_input *input,
				 struct ibv_device_attr_ex *attr, size_t attr_size);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct gv_context *c;
	int fds[2], rc;

	if (gv_fork_guard())
		return NULL;
	if (!device || ibv_get_device_index(device) < 0 || ibv_get_device_index(device) >= gv_ndevs) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(fds, O_CLOEXEC) < 0) {
		free(c);
		return NULL;
	}
	fcntl(fds[1], F_SETFL, O_NONBLOCK); /* the Go side drops events rather than block */
	rc = gv_open(device->name, fds[1], &c->h);
	if (rc) {
		close(fds[0]);
		close(fds[1]);
		free(c);
		errno = rc;
		return NULL;
	}
	c->async_wfd = fds[1];

	struct ibv_context *ctx = &c->vctx.context;
	ctx->device = device;
	/*
	 * No kernel command channel: /dev/null stands in, so that a program that dups
	 * cmd_fd to share the context (ibv_import_device) gets EOPNOTSUPP from the import,
	 * not EBADF from dup.
	 */
	ctx->cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	ctx->async_fd = fds[0];
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->ops.poll_cq = gv_op_poll_cq;
	ctx->ops.req_notify_cq = gv_op_req_notify_cq;
	ctx->ops.post_send = gv_op_post_send;
	ctx->ops.post_recv = gv_op_post_recv;
	ctx->ops.post_srq_recv = gv_op_post_srq_recv;
	ctx->ops.alloc_mw = gv_op_alloc_mw;
	ctx->ops.dealloc_mw = gv_op_dealloc_mw;
	ctx->ops.bind_mw = gv_op_bind_mw;
	c->vctx.sz = sizeof(c->vctx);
	c->vctx.query_port = gv_op_query_port;
	c->vctx.query_device_ex = gv_op_query_device_ex;
	c->vctx.create_qp_ex = gv_op_create_qp_ex;
	c->vctx.create_cq_ex = gv_op_create_cq_ex;
	c->vctx.open_xrcd = gv_op_open_xrcd;
	c->vctx.close_xrcd = gv_op_close_xrcd;
	c->vctx.create_srq_ex = gv_op_create_srq_ex;
	c->vctx.get_srq_num = gv_op_get_srq_num;
	return ctx;
}

int ibv_close_device(struct ibv_context *context)
{
	struct gv_context *c;
	int rc;

	if (!context)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	c = gv_ctx(context);
	rc = gv_close(c->h);
	close(context->async_fd);
	close(c->async_wfd);
	if (context->cmd_fd >= 0)
		close(context->cmd_fd);
	pthread_mutex_destroy(&context->mutex);
	free(c);
	return rc;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	if (!context || !device_attr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	return gv_query_device(gv_ctx(context)->h, device_attr);
}

static int gv_op_query_device_ex(struct ibv_context *context,
				 const struct ibv_query_device_ex_input *input,
				 struct ibv_device_attr_ex *attr, size_t attr_size)
{
	int rc;

	if (!context || !attr || attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	if (input && input->comp_mask)
		return EINVAL;
	memset(attr, 0, attr_size);
	rc = ibv_query_device(context, &attr->orig_attr);
	if (rc)
		return rc;
	/* Of the extended attributes only the port count: no ODP, TSO, RSS, timestamps. */
	if (attr_size >= offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex) + sizeof(attr->phys_port_cnt_ex))
		attr->phys_port_cnt_ex = attr->orig_attr.phys_port_cnt;
	return 0;
}

static int gv_op_query_port(struct ibv_context *context, uint8_t port_num,
			    struct ibv_port_attr *port_attr, size_t port_attr_len)
{
	struct ibv_port_attr a;
	int rc;

	if (!context || !port_attr)
		return EINVAL;
	if (gv_fork_guard())
		return ENOSYS;
	rc = gv_query_port(gv_ctx(context)->h, port_num, &a);
	if (rc)
		return rc;
	memcpy(port_attr, &a, port_attr_len < sizeof(a) ? port_attr_len : sizeof(a));
	return 0;
}

/*
 * The exported ibv_query_port is what programs built before verbs_context's query_port
 * call, with a struct that ends before flags (rdma-core's _compat_ibv_port_attr).
 */
#undef ibv_query_port
int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr)
{
	return gv_op_query_port(context, port_num, (struct ibv_port_attr *)port_attr,
				offsetof(struct ibv_port_attr, flags));
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	if (!context || !gid)
		return -1;
	if (gv_fork_guard())
		return -1;
	if (gv_query_gid(gv_ctx(context)->h, port_num, index, gid)) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* rdma-core's enum ibv_gid_type_sysfs (driver.h, not installed): 1 is RoCE v2. */
enum { GV_GID_TYPE_SYSFS_ROCE_V2 = 1 };

int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type)
{
	union ibv_gid gid;

	if (!type || ibv_query_gid(context, port_num, (int)index, &gid))
		return -1;
	*type = GV_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

static void gv_fill_gid_entry(struct ibv_gid_entry *e, uint32_t port_num, uint32_t index, union ibv_gid *gid)
{
	memset(e, 0, sizeof(*e));
	e->gid = *gid;
	e->gid_index = index;
	e->port_num = port_num;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	union ibv_gid gid;

	if (!context || !entry || flags || entry_size < sizeof(*entry))
		return EINVAL;
	if (port_num > 255 || ibv_query_gid(context, (uint8_t)port_num, (int)gid_index, &gid))
		return ENODATA;
	gv_fill_gid_entry(entry, port_num, gid_index, &gid);
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct ibv_device_attr da;
	size_t n = 0;
	int port, i, len;

	if (!context || (!entries && max_entries) || flags || entry_size < sizeof(*entries))
		return -EINVAL;
	if (ibv_query_device(context, &da))
		return -EINVAL;
	for (port = 1; port <= da.phys_port_cnt; port++) {
		len = gv_gid_count(gv_ctx(context)->h, port);
		if (len < 0)
			return len;
		for (i = 0; i < len; i++) {
			union ibv_gid gid;

			if (ibv_query_gid(context, port, i, &gid))
				return -EINVAL;
			if (n == max_entries)
				return -EINVAL;
			gv_fill_gid_entry(&entries[n++], port, i, &gid);
		}
	}
	return n;
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	if (!context || !pkey || port_num != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff); /* the default P_Key, the table's one entry */
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	if (!context || port_num != 1)
		return -1;
	return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -1;
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	ssize_t n;

	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	n = read(context->async_fd, event, sizeof(*event));
	if (n != (ssize_t)sizeof(*event)) {
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	pthread_mutex_t *mu;
	uint32_t *count;

	if (!event)
		return;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		mu = &event->element.cq->mutex;
		count = &event->element.cq->async_events_completed;
		break;
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		mu = &event->element.qp->mutex;
		count = &event->element.qp->events_completed;
		break;
	case IBV_EVENT_SRQ_ERR: case IBV_EVENT_SRQ_LIMIT_REACHED:
		mu = &event->element.srq->mutex;
		count = &event->element.srq->events_completed;
		break;
	default:
		return;
	}
	pthread_mutex_lock(mu);
	++*count;
	pthread_mutex_unlock(mu);
}

/*
 * sysfs: a software device has no directory there, so ibv_read_sysfs_file answers the
 * files tools read from a device's ibdev_path (ibv_devinfo: board_id) and fails for the
 * rest as for a missing file. As rdma-core's does, it returns the value without the
 * file's trailing newline and the count of bytes written, the NUL excluded.
 */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	const char *val = NULL;
	int i, n;

	if (!dir || !file || !buf || !size) {
		errno = EINVAL;
		return -1;
	}
	for (i = 0; i < gv_ndevs; i++) {
		if (strcmp(dir, gv_devs[i].dev.ibdev_path) != 0)
			continue;
		if (strcmp(file, "board_id") == 0)
			val = "goverbs software RoCEv2";
		else if (strcmp(file, "node_type") == 0)
			val = "1: CA";
		break;
	}
	if (!val) {
		errno = ENOENT;
		return -1;
	}
	n = snprintf(buf, size, "%s", val);
	return n < (int)size ? n : (int)size - 1;
}

const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
#ifdef GOVERBS_ATTACH
	/* Registered pages are moved onto shared memory and MADV_DONTFORK, as ibv_fork_init makes them. */
	return IBV_FORK_ENABLED;
#else
	/* Registered memory is the program's, never pinned by a kernel: nothing to do. */
	return IBV_FORK_UNNEEDED;
#endif
}

int ibv_dontfork_range(void *base, size_t size) { (void)base; (void)size; return 0; }
int ibv_dofork_range(void *base, size_t size) { (void)base; (void)size; return 0; }
