/*
 * Devices: the list (GOVERBS_DEVICES), opening one (a HELLO connection to its daemon),
 * its attributes, and the async events the daemon sends on the event socket.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "gva.h"

enum { GVA_MAX_DEVS = 32 };

int gv_devices(char *names, int nameLen, uint64_t *guids, int max)
{
	struct gva_entry e[GVA_MAX_DEVS];
	int n = gva_parse_devices(e, max < GVA_MAX_DEVS ? max : GVA_MAX_DEVS);

	for (int i = 0; i < n; i++) {
		snprintf(names + (size_t)i * nameLen, nameLen, "%s", e[i].name);
		guids[i] = e[i].guid;
	}
	return n;
}

void gva_track(struct gva_dev *d, uint32_t kind, uint32_t h, void *obj)
{
	pthread_mutex_lock(&d->objmu);
	if (d->nobjs == d->capobjs) {
		size_t cap = d->capobjs ? 2 * d->capobjs : 16;
		void *p = realloc(d->objs, cap * sizeof(*d->objs));

		if (!p) { /* its events are lost: nothing else depends on the table */
			pthread_mutex_unlock(&d->objmu);
			return;
		}
		d->objs = p;
		d->capobjs = cap;
	}
	d->objs[d->nobjs++] = (struct gva_objref){ .h = h, .kind = kind, .obj = obj };
	pthread_mutex_unlock(&d->objmu);
}

void gva_untrack(struct gva_dev *d, uint32_t kind, uint32_t h)
{
	pthread_mutex_lock(&d->objmu);
	for (size_t i = 0; i < d->nobjs; i++) {
		if (d->objs[i].h == h && d->objs[i].kind == kind) {
			d->objs[i] = d->objs[--d->nobjs];
			break;
		}
	}
	pthread_mutex_unlock(&d->objmu);
}

/* Called with objmu held. */
void *gva_lookup(struct gva_dev *d, uint32_t kind, uint32_t h)
{
	for (size_t i = 0; i < d->nobjs; i++)
		if (d->objs[i].h == h && d->objs[i].kind == kind)
			return d->objs[i].obj;
	return NULL;
}

static void gva_emit(struct gva_dev *d, enum ibv_event_type type, void *obj, int port)
{
	struct ibv_async_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_type = type;
	if (obj)
		ev.element.qp = obj; /* the union's members are all pointers */
	else
		ev.element.port_num = port;
	/* a full pipe (64 KiB of unread events) drops the event, never stalls us */
	if (write(d->async_wfd, &ev, sizeof(ev)) < 0)
		gva_debug("async event %d dropped", type);
}

/*
 * gva_events forwards the event socket's events to the program's async_fd. Its end
 * (or an error) means the daemon is gone: the device is dead, and the program gets
 * IBV_EVENT_DEVICE_FATAL once.
 */
static void *gva_events(void *arg)
{
	struct gva_dev *d = arg;
	struct pollfd p[2] = { { .fd = d->evsock, .events = POLLIN }, { .fd = d->stopfd, .events = POLLIN } };
	uint8_t b[64];

	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			return NULL; /* gv_close */
		ssize_t n = recv(d->evsock, b, sizeof(b), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != GVA_EV_LEN)
			break;
		struct gva_rd r = { .p = b, .n = (size_t)n };
		uint32_t type = gva_get32(&r), kind = gva_get32(&r), h = gva_get32(&r);
		if (kind == GVA_EV_PORT) {
			gva_emit(d, type, NULL, (int)h);
			continue;
		}
		/* objmu stays held while the event is written, so that a destroy waits for it */
		pthread_mutex_lock(&d->objmu);
		void *obj = gva_lookup(d, kind, h);
		if (obj)
			gva_emit(d, type, obj, 0);
		pthread_mutex_unlock(&d->objmu);
	}
	__atomic_store_n(&d->dead, 1, __ATOMIC_SEQ_CST);
	fprintf(stderr, "goverbs: %s: the goverbs serve daemon is gone\n", d->name);
	gva_emit(d, IBV_EVENT_DEVICE_FATAL, NULL, 1);
	return NULL;
}

static void gva_free_dev(struct gva_dev *d)
{
	if (d->have_thr) {
		uint64_t one = 1;

		if (write(d->stopfd, &one, sizeof(one)) < 0)
			gva_debug("stop the event thread: %m");
		gva_join(d->evthr);
	}
	if (d->sock >= 0)
		close(d->sock);
	if (d->evsock >= 0)
		close(d->evsock);
	if (d->doorbell >= 0)
		close(d->doorbell);
	if (d->stopfd >= 0)
		close(d->stopfd);
	pthread_mutex_destroy(&d->mu);
	pthread_mutex_destroy(&d->objmu);
	free(d->objs);
	free(d);
}

static enum ibv_mtu gva_mtu(uint8_t v) { return v >= 1 && v <= 5 ? (enum ibv_mtu)v : IBV_MTU_1024; }

/* gva_query reads the device's attributes, port and GIDs once. */
static int gva_query(struct gva_dev *d)
{
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	struct ibv_device_attr *a = &d->attr;
	int rc;

	gva_msg_init(&m);
	if ((rc = gva_call(d, GVA_QUERY_DEVICE, &m, NULL, 0, buf, &r, NULL, 0)))
		return rc;
	memset(a, 0, sizeof(*a));
	gva_getstr(&r, a->fw_ver, sizeof(a->fw_ver));
	a->node_guid = htobe64(gva_get64(&r));
	a->sys_image_guid = htobe64(gva_get64(&r));
	a->max_mr_size = gva_get64(&r);
	a->page_size_cap = gva_get64(&r);
	a->vendor_id = (uint32_t)gva_get64(&r);
	a->vendor_part_id = (uint32_t)gva_get64(&r);
	a->hw_ver = (uint32_t)gva_get64(&r);
#define GVA_INT(f) a->f = (int)(gva_get64(&r) & 0x7fffffff)
	GVA_INT(max_qp);
	GVA_INT(max_qp_wr);
	/* XRC included: the C flavour serves it through the daemon's XRC commands */
	a->device_cap_flags = (unsigned int)gva_get64(&r);
	GVA_INT(max_sge);
	GVA_INT(max_sge_rd);
	GVA_INT(max_cq);
	GVA_INT(max_cqe);
	GVA_INT(max_mr);
	GVA_INT(max_pd);
	GVA_INT(max_qp_rd_atom);
	GVA_INT(max_qp_init_rd_atom);
	GVA_INT(max_srq);
	GVA_INT(max_srq_wr);
	GVA_INT(max_srq_sge);
	GVA_INT(max_ah);
	GVA_INT(max_mcast_grp);
	GVA_INT(max_mcast_qp_attach);
	GVA_INT(max_total_mcast_qp_attach);
	GVA_INT(max_mw);
#undef GVA_INT
	gva_get64(&r); /* max_inline_data: not in ibv_device_attr */
	a->atomic_cap = (enum ibv_atomic_cap)gva_get64(&r);
	a->phys_port_cnt = (uint8_t)gva_get64(&r);
	a->max_pkeys = (uint16_t)gva_get64(&r);
	/* as the Go flavour reports it: every QP's responder resources */
	int64_t res = (int64_t)a->max_qp_rd_atom * a->max_qp;
	a->max_res_rd_atom = res > INT32_MAX ? INT32_MAX : (int)res;
	if (r.short_)
		return EIO;

	gva_msg_init(&m);
	gva_put8(&m, 1);
	if ((rc = gva_call(d, GVA_QUERY_PORT, &m, NULL, 0, buf, &r, NULL, 0)))
		return rc;
	struct ibv_port_attr *p = &d->port;
	char ll[32], tmp[32];
	memset(p, 0, sizeof(*p));
	p->state = (enum ibv_port_state)gva_get8(&r);
	p->max_mtu = gva_mtu(gva_get8(&r));
	p->active_mtu = gva_mtu(gva_get8(&r));
	p->lmc = gva_get8(&r);
	p->phys_state = gva_get8(&r);
	gva_getn(&r, tmp, 3);
	p->gid_tbl_len = (int)gva_get32(&r);
	p->port_cap_flags = gva_get32(&r);
	p->max_msg_sz = gva_get32(&r);
	p->pkey_tbl_len = gva_get16(&r);
	p->lid = gva_get16(&r);
	p->sm_lid = gva_get16(&r);
	gva_getstr(&r, ll, sizeof(ll));
	gva_getstr(&r, tmp, sizeof(tmp));
	gva_getstr(&r, tmp, sizeof(tmp));
	p->link_layer = strcmp(ll, "InfiniBand") == 0 ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
	p->max_vl_num = 1;
	/* as the Go flavour: 1X at 25 Gb/s, what rxe reports on a link it cannot measure */
	p->active_width = 1;
	p->active_speed = 32;
	if (r.short_)
		return EIO;

	gva_msg_init(&m);
	gva_put8(&m, 1);
	if ((rc = gva_call(d, GVA_QUERY_GID, &m, NULL, 0, buf, &r, NULL, 0)))
		return rc;
	uint32_t n = gva_get32(&r);
	d->ngids = 0;
	for (uint32_t i = 0; i < n && !r.short_ && d->ngids < 16; i++) {
		d->gid_index[d->ngids] = (int)gva_get32(&r);
		gva_getn(&r, d->gids[d->ngids].raw, 16);
		gva_getstr(&r, tmp, sizeof(tmp));
		d->ngids++;
	}
	return r.short_ ? EIO : 0;
}

/* gva_hello attaches: HELLO, and the event socket and doorbell it hands out. */
static int gva_hello(struct gva_dev *d)
{
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	int fds[2], rc;
	char prog[256] = "c";
	FILE *f = fopen("/proc/self/comm", "re");

	if (f) {
		if (fgets(prog, sizeof(prog), f))
			prog[strcspn(prog, "\n")] = 0;
		fclose(f);
	}
	gva_msg_init(&m);
	gva_put32(&m, GVA_VERSION);
	gva_put32(&m, (uint32_t)getpid());
	gva_put16(&m, (uint16_t)strlen(prog));
	gva_putn(&m, prog, strlen(prog));
	if ((rc = gva_call(d, GVA_HELLO, &m, NULL, 0, buf, &r, fds, 2)))
		return rc;
	d->evsock = fds[0];
	d->doorbell = fds[1];
	if (gva_get32(&r) != GVA_VERSION)
		return EPROTO;
	return 0;
}

int gv_open(char *name, int asyncFD, uintptr_t *out)
{
	struct gva_entry e[GVA_MAX_DEVS];
	struct gva_dev *d;
	int n = gva_parse_devices(e, GVA_MAX_DEVS), i, rc;

	for (i = 0; i < n && strcmp(e[i].name, name) != 0; i++)
		;
	if (i >= n)
		return ENODEV;
	d = calloc(1, sizeof(*d));
	if (!d)
		return ENOMEM;
	d->sock = d->evsock = d->doorbell = d->stopfd = -1;
	d->async_wfd = asyncFD;
	d->pid = gva_getpid();
	snprintf(d->name, sizeof(d->name), "%s", name);
	pthread_mutex_init(&d->mu, NULL);
	pthread_mutex_init(&d->objmu, NULL);
	if ((rc = gva_connect(&e[i], &d->sock)) || (rc = gva_hello(d)) || (rc = gva_query(d)))
		goto fail;
	d->stopfd = eventfd(0, EFD_CLOEXEC);
	if (d->stopfd < 0) {
		rc = errno;
		goto fail;
	}
	if ((rc = gva_thread(&d->evthr, gva_events, d)))
		goto fail;
	d->have_thr = 1;
	gva_dev_register(d);
	*out = (uintptr_t)d;
	return 0;
fail:
	gva_debug("open %s: %s", name, strerror(rc));
	gva_free_dev(d);
	return rc == EIO || rc == ECONNREFUSED || rc == ENOENT ? ENODEV : rc;
}

/*
 * gv_close detaches: closing the control socket makes the daemon destroy whatever the
 * context left, as the kernel does when a process closes its uverbs file.
 */
/*
 * GOVERBS_STATS: the device's counters on stderr when a context closes, as the Go
 * flavour and the goverbs tools print them (iproute2's `rdma statistic show` layout).
 * They are the device's, shared by every process attached to it.
 */
static void gva_print_stats(struct gva_dev *d)
{
	const char *v = getenv("GOVERBS_STATS");
	uint8_t buf[GVA_MAX_MSG];
	struct gva_msg m;
	struct gva_rd r;
	char line[GVA_MAX_MSG * 2], name[128];
	size_t n;

	if (!v || !*v || strcmp(v, "0") == 0)
		return;
	gva_msg_init(&m);
	if (gva_call(d, GVA_DEVICE_COUNTERS, &m, NULL, 0, buf, &r, NULL, 0))
		return;
	n = (size_t)snprintf(line, sizeof(line), "link %s/1", d->name);
	for (uint32_t i = 0, k = gva_get32(&r); i < k && !r.short_ && n < sizeof(line); i++) {
		gva_getstr(&r, name, sizeof(name));
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %s %llu", name, (unsigned long long)gva_get64(&r));
	}
	fprintf(stderr, "%s\n", line);
}

int gv_close(uintptr_t h)
{
	struct gva_dev *d = (struct gva_dev *)h;

	if (!d)
		return EINVAL;
	if (!gva_usable(d))
		gva_print_stats(d);
	gva_close_mrs(d);
	gva_dev_unregister(d);
	gva_free_dev(d);
	return 0;
}

int gv_query_device(uintptr_t h, struct ibv_device_attr *a)
{
	struct gva_dev *d = (struct gva_dev *)h;

	if (!d)
		return EINVAL;
	*a = d->attr;
	return 0;
}

int gv_query_port(uintptr_t h, uint8_t port, struct ibv_port_attr *a)
{
	struct gva_dev *d = (struct gva_dev *)h;

	if (!d || port != 1)
		return EINVAL;
	*a = d->port;
	if (__atomic_load_n(&d->dead, __ATOMIC_SEQ_CST))
		a->state = IBV_PORT_DOWN;
	return 0;
}

int gv_query_gid(uintptr_t h, uint8_t port, int index, union ibv_gid *gid)
{
	struct gva_dev *d = (struct gva_dev *)h;

	if (!d || port != 1)
		return EINVAL;
	for (int i = 0; i < d->ngids; i++) {
		if (d->gid_index[i] == index) {
			*gid = d->gids[i];
			return 0;
		}
	}
	return EINVAL;
}

int gv_gid_count(uintptr_t h, uint8_t port)
{
	struct gva_dev *d = (struct gva_dev *)h;

	if (!d || port != 1)
		return -EINVAL;
	return d->ngids;
}

/* goverbs' own test hook (capi/debug.go in the Go flavour): this flavour has no Go heap. */
uint64_t goverbs_heap_allocs(void);
uint64_t goverbs_heap_allocs(void)
{
	return 0;
}
