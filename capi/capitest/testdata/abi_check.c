/*
 * abi_check: a C program against <infiniband/verbs.h>, run on goverbs' libibverbs.so.1
 * by capi_test.go. With no argument it checks, on the first device, that bad arguments
 * fail with the errno libibverbs documents, that RC traffic reads and writes the
 * program's own memory in place, that completion channels and the async event fd are
 * pollable fds, that a UD QP attaches to a multicast group, and that a child after fork()
 * gets ENOSYS instead of hanging, and that IBV_SEND_INLINE and ibv_wr_set_inline_data send
 * from unregistered memory (lkey 0), copied at the call. It prints
 * "ok" and exits 0, or names the first failed check and exits 1.
 *
 * "abi_check attached" runs the same checks on the C flavour of the library (devices
 * attached to a goverbs serve daemon, no Go runtime), except the fork check, which there
 * is that the parent keeps working after fork() (a ping-pong of SENDs while the child
 * runs) and that the child, whose copy of the parent's context fails with EIO, opens
 * the device anew, queries it and registers memory; a buffer that shares its pages with
 * other data registers in a program of one thread and is refused (EINVAL) in one of two,
 * as is shared memory;
 * posts beyond a QP's limits fail at once (EINVAL, ENOMEM); registered pages go back to
 * private memory at deregistration and at close;
 * and four threads make QPs on one context and post and poll on them at once. "abi_check fatal" opens the device,
 * says "ready", and waits for IBV_EVENT_DEVICE_FATAL (its test kills the daemon), after
 * which commands and posts fail with EIO; it prints "fatal ok".
 *
 * "abi_check bench N" times N signaled 8-byte RDMA WRITEs, each posted and polled to
 * completion, over a QP looped back to a second QP of the same device, and prints
 * "ns/op X" and, on goverbs' library (which exports goverbs_heap_allocs), "allocs/op Y":
 * the Go heap objects allocated per post and poll. "abi_check bench N inline" posts the
 * same WRITEs with IBV_SEND_INLINE from an unregistered word (lkey 0).
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(cond, what) do { if (!(cond)) { \
	fprintf(stderr, "FAIL %s (line %d, errno %d %s)\n", what, __LINE__, errno, strerror(errno)); \
	exit(1); } } while (0)

/* The max_inline_data the RC QPs ask for. */
enum { INLINE_MAX = 64 };

struct pair {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	uint8_t *buf; /* a: [0, 4096), b: [4096, 8192) */
};

static struct ibv_qp *make_qp(struct pair *p)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = p->cq, .recv_cq = p->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = INLINE_MAX },
	};
	struct ibv_qp *qp = ibv_create_qp(p->pd, &ia);

	CHECK(qp && ia.cap.max_inline_data >= INLINE_MAX, "create RC QP");
	return qp;
}

static void to_state(struct ibv_qp *qp, struct ibv_qp *peer, union ibv_gid *gid, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s };
	int mask = IBV_QP_STATE;

	if (s == IBV_QPS_INIT) {
		a.port_num = 1;
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (s == IBV_QPS_RTR) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = peer->qp_num;
		a.rq_psn = 100;
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	} else if (s == IBV_QPS_RTS) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.sq_psn = 100;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	CHECK(ibv_modify_qp(qp, &a, mask) == 0, "modify QP");
	CHECK(qp->state == s, "qp->state follows modify");
}

static void setup(struct pair *p, int b_rts)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	union ibv_gid gid;

	CHECK(list && list[0], "a device");
	p->ctx = ibv_open_device(list[0]);
	CHECK(p->ctx, "open device");
	ibv_free_device_list(list);
	CHECK(ibv_query_gid(p->ctx, 1, 0, &gid) == 0, "query GID 0");
	p->pd = ibv_alloc_pd(p->ctx);
	CHECK(p->pd, "alloc PD");
	p->ch = ibv_create_comp_channel(p->ctx);
	CHECK(p->ch, "create comp channel");
	p->cq = ibv_create_cq(p->ctx, 128, p, p->ch, 0);
	CHECK(p->cq && p->cq->cqe >= 128, "create CQ");
	p->buf = aligned_alloc(4096, 8192);
	memset(p->buf, 0, 8192);
	p->mr = ibv_reg_mr(p->pd, p->buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(p->mr && p->mr->addr == p->buf && p->mr->length == 8192, "reg MR");
	p->a = make_qp(p);
	p->b = make_qp(p);
	to_state(p->a, p->b, &gid, IBV_QPS_INIT);
	to_state(p->a, p->b, &gid, IBV_QPS_RTR);
	to_state(p->a, p->b, &gid, IBV_QPS_RTS);
	to_state(p->b, p->a, &gid, IBV_QPS_INIT);
	to_state(p->b, p->a, &gid, IBV_QPS_RTR);
	if (b_rts)
		to_state(p->b, p->a, &gid, IBV_QPS_RTS);
}

static void teardown(struct pair *p)
{
	CHECK(ibv_destroy_qp(p->a) == 0 && ibv_destroy_qp(p->b) == 0, "destroy QPs");
	CHECK(ibv_dereg_mr(p->mr) == 0, "dereg MR");
	CHECK(ibv_destroy_cq(p->cq) == 0, "destroy CQ");
	CHECK(ibv_destroy_comp_channel(p->ch) == 0, "destroy channel");
	CHECK(ibv_dealloc_pd(p->pd) == 0, "dealloc PD");
	CHECK(ibv_close_device(p->ctx) == 0, "close device");
	free(p->buf);
}

/* post one work request on a and spin until its completion. */
static struct ibv_wc run(struct pair *p, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;
	int n;

	CHECK(ibv_post_send(p->a, wr, &bad) == 0, "post send");
	while ((n = ibv_poll_cq(p->cq, 1, &wc)) == 0)
		;
	CHECK(n == 1, "poll CQ");
	return wc;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int bench(long iters, int inline_stack)
{
	uint64_t (*heap_allocs)(void) = (uint64_t (*)(void))dlsym(RTLD_DEFAULT, "goverbs_heap_allocs");
	struct pair p;
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	uint64_t a0 = 0;
	double t0;

	setup(&p, 1);
	sge = (struct ibv_sge){ .addr = (uintptr_t)p.buf, .length = 8, .lkey = p.mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)p.buf + 4096;
	wr.wr.rdma.rkey = p.mr->rkey;
	if (inline_stack) {
		static volatile uint64_t word = 42; /* unregistered: the library stages it */

		sge = (struct ibv_sge){ .addr = (uintptr_t)&word, .length = 8, .lkey = 0 };
		wr.send_flags |= IBV_SEND_INLINE;
	}
	for (long i = 0; i < iters / 10 + 1; i++) /* warm up */
		CHECK(run(&p, &wr).status == IBV_WC_SUCCESS, "warm-up WRITE");
	if (heap_allocs)
		a0 = heap_allocs();
	t0 = now_ns();
	for (long i = 0; i < iters; i++)
		CHECK(run(&p, &wr).status == IBV_WC_SUCCESS, "WRITE");
	printf("ns/op %.1f\n", (now_ns() - t0) / iters);
	if (heap_allocs)
		printf("allocs/op %.4f\n", (double)(heap_allocs() - a0) / iters);
	teardown(&p);
	return 0;
}

static void check_bad_arguments(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	void *gone;

	errno = 0;
	CHECK(!ibv_open_device(NULL) && errno == EINVAL, "open_device(NULL): EINVAL");
	errno = 0;
	CHECK(!ibv_alloc_pd(NULL) && errno == EINVAL, "alloc_pd(NULL): EINVAL");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open device");
	ibv_free_device_list(list);
	CHECK(ibv_query_port(ctx, 2, &pa) != 0, "query_port(2) fails");
	CHECK(ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE &&
	      pa.link_layer == IBV_LINK_LAYER_ETHERNET, "port 1 active, Ethernet");
	CHECK(ibv_query_gid(ctx, 1, 7, &gid) != 0, "query_gid(7) fails");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc PD");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, NULL, 64, 0) && errno == EINVAL, "reg_mr(NULL): EINVAL");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, &gid, 0, 0) && errno == EINVAL, "reg_mr(length 0): EINVAL");
	gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, 8192);
	errno = 0;
	CHECK(!ibv_reg_mr(pd, gone, 8192, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT, "reg_mr(unmapped): EFAULT");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, &gid, sizeof(gid), IBV_ACCESS_ON_DEMAND) && errno == EOPNOTSUPP,
	      "reg_mr(ON_DEMAND): EOPNOTSUPP");
	errno = 0;
	CHECK(!ibv_create_cq(ctx, 0, NULL, NULL, 0) && errno == EINVAL, "create_cq(0): EINVAL");
	errno = 0;
	CHECK(!ibv_create_cq(ctx, 16, NULL, NULL, 5) && errno == EINVAL, "create_cq(vector 5): EINVAL");
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "create CQ");
	errno = 0;
	CHECK(!ibv_create_qp(pd, NULL) && errno == EINVAL, "create_qp(NULL): EINVAL");
	{
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = NULL, .qp_type = IBV_QPT_RC,
					       .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };

		errno = 0;
		CHECK(!ibv_create_qp(pd, &ia) && errno == EINVAL, "create_qp(no recv CQ): EINVAL");
		ia.recv_cq = cq;
		ia.qp_type = 99;
		errno = 0;
		CHECK(!ibv_create_qp(pd, &ia) && errno == EINVAL, "create_qp(type 99): EINVAL");
		ia.qp_type = IBV_QPT_RC;
		qp = ibv_create_qp(pd, &ia);
		CHECK(qp && qp->qp_num != 0 && qp->state == IBV_QPS_RESET, "create QP");
	}
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
		struct ibv_sge sge = { 0 };
		struct ibv_send_wr wr = { .sg_list = NULL, .num_sge = 1, .opcode = IBV_WR_SEND };
		struct ibv_send_wr *bad = NULL;

		CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "modify_qp RESET->RTR: EINVAL");
		CHECK(ibv_modify_qp(qp, &a, 1 << 30) == EINVAL, "modify_qp(unknown mask bit): EINVAL");
		CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "post_send(NULL sg_list): EINVAL, bad_wr");
		wr.sg_list = &sge;
		bad = NULL;
		CHECK(ibv_post_send(qp, &wr, &bad) != 0 && bad == &wr, "post_send in RESET fails, bad_wr");
	}
	CHECK(ibv_destroy_cq(cq) == EBUSY, "destroy_cq in use: EBUSY");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd in use: EBUSY");
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "destroy");
	CHECK(ibv_close_device(ctx) == 0, "close device");
}

static void check_traffic(void)
{
	struct pair p;
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	struct ibv_async_event ev;
	struct ibv_wc wc;
	struct ibv_cq *evcq;
	void *evctx;
	struct pollfd pfd;

	setup(&p, 0); /* b stays in RTR: its first packet raises COMM_EST */
	memcpy(p.buf, "written in place", 17);
	sge = (struct ibv_sge){ .addr = (uintptr_t)p.buf, .length = 17, .lkey = p.mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)p.buf + 4096;
	wr.wr.rdma.rkey = p.mr->rkey;

	/* The completion arrives through the channel's fd, which poll(2) sees. */
	CHECK(ibv_req_notify_cq(p.cq, 0) == 0, "req_notify_cq");
	{
		struct ibv_send_wr *bad;

		CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post WRITE");
	}
	pfd = (struct pollfd){ .fd = p.ch->fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 10000) == 1, "channel fd readable");
	CHECK(ibv_get_cq_event(p.ch, &evcq, &evctx) == 0 && evcq == p.cq && evctx == &p, "get_cq_event");
	ibv_ack_cq_events(evcq, 1);
	/* One event per arming: once taken the fd is quiet, and a non-blocking channel's
	 * get_cq_event says EAGAIN, as the kernel's event file does. */
	pfd = (struct pollfd){ .fd = p.ch->fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 0) == 0, "channel fd quiet once the event is taken");
	{
		int fl = fcntl(p.ch->fd, F_GETFL);

		CHECK(fl >= 0 && fcntl(p.ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "channel fd made non-blocking");
		errno = 0;
		CHECK(ibv_get_cq_event(p.ch, &evcq, &evctx) == -1 && errno == EAGAIN,
		      "non-blocking get_cq_event without an event: EAGAIN");
		CHECK(fcntl(p.ch->fd, F_SETFL, fl) == 0, "channel fd blocking again");
	}
	CHECK(ibv_poll_cq(p.cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 &&
	      wc.opcode == IBV_WC_RDMA_WRITE, "WRITE completion");
	CHECK(memcmp(p.buf + 4096, "written in place", 17) == 0, "WRITE landed in the program's memory");

	/* The device reports its port active first, then b's first packet. */
	for (int i = 0; i < 4; i++) {
		pfd = (struct pollfd){ .fd = p.ctx->async_fd, .events = POLLIN };
		CHECK(poll(&pfd, 1, 10000) == 1, "async fd readable");
		CHECK(ibv_get_async_event(p.ctx, &ev) == 0, "get_async_event");
		if (ev.event_type != IBV_EVENT_PORT_ACTIVE)
			break;
		CHECK(ev.element.port_num == 1, "PORT_ACTIVE names port 1");
	}
	CHECK(ev.event_type == IBV_EVENT_COMM_EST && ev.element.qp == p.b, "COMM_EST on b");
	ibv_ack_async_event(&ev);
	CHECK(p.b->events_completed == 1, "ack_async_event counts");
	{
		union ibv_gid gid;

		CHECK(ibv_query_gid(p.ctx, 1, 0, &gid) == 0, "query GID");
		to_state(p.b, p.a, &gid, IBV_QPS_RTS);
	}

	/* READ it back into a, then a FETCH_ADD on b's memory. */
	memset(p.buf, 0, 64);
	wr.opcode = IBV_WR_RDMA_READ;
	CHECK(run(&p, &wr).status == IBV_WC_SUCCESS, "READ");
	CHECK(memcmp(p.buf, "written in place", 17) == 0, "READ landed in the program's memory");
	*(uint64_t *)(p.buf + 4096 + 64) = 40;
	sge.length = 8;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)p.buf + 4096 + 64;
	wr.wr.atomic.rkey = p.mr->rkey;
	wr.wr.atomic.compare_add = 2;
	wc = run(&p, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD, "FETCH_ADD");
	CHECK(*(uint64_t *)p.buf == 40 && *(uint64_t *)(p.buf + 4096 + 64) == 42, "FETCH_ADD values");

	/* SEND with immediate: imm_data is big-endian both ways. */
	{
		struct ibv_sge rsge = { .addr = (uintptr_t)p.buf + 4096 + 128, .length = 64, .lkey = p.mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 9, .sg_list = &rsge, .num_sge = 1 }, *rbad;
		struct ibv_wc wcs[2];
		int got = 0;

		CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0, "post recv");
		wr.opcode = IBV_WR_SEND_WITH_IMM;
		wr.imm_data = htonl(0x01020304);
		wr.wr_id = 8;
		{
			struct ibv_send_wr *bad;

			CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post SEND_WITH_IMM");
		}
		while (got < 2) {
			int n = ibv_poll_cq(p.cq, 2 - got, wcs + got);

			CHECK(n >= 0, "poll");
			got += n;
		}
		for (int i = 0; i < 2; i++) {
			if (wcs[i].wr_id != 9)
				continue;
			CHECK(wcs[i].opcode == IBV_WC_RECV && (wcs[i].wc_flags & IBV_WC_WITH_IMM) &&
			      ntohl(wcs[i].imm_data) == 0x01020304 && wcs[i].byte_len == 8 &&
			      wcs[i].qp_num == p.b->qp_num, "receive completion with immediate");
		}
	}

	/* A region with a window bound to it refuses dereg with EBUSY and stays registered:
	 * once the window is gone, the same ibv_dereg_mr succeeds. */
	{
		uint8_t *mem = p.buf + 4096 + 256;
		struct ibv_mr *mr = ibv_reg_mr(p.pd, mem, 256, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_MW_BIND);
		struct ibv_mw *mw = ibv_alloc_mw(p.pd, IBV_MW_TYPE_1);
		struct ibv_mw_bind bind = { .wr_id = 10, .send_flags = IBV_SEND_SIGNALED,
					    .bind_info = { .mr = mr, .addr = (uintptr_t)mem, .length = 256,
							   .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
		int n;

		CHECK(mr && mw, "reg MR with MW_BIND, alloc type 1 MW");
		CHECK(ibv_bind_mw(p.a, mw, &bind) == 0, "bind_mw");
		while ((n = ibv_poll_cq(p.cq, 1, &wc)) == 0)
			;
		CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 10, "bind completion");
		CHECK(ibv_dereg_mr(mr) == EBUSY, "dereg_mr with a bound window: EBUSY");
		CHECK(ibv_dealloc_mw(mw) == 0, "dealloc MW");
		CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr after its window is gone");
	}

	/* Multicast: a UD QP attaches to a group's GID (IPv4-mapped 239.x.y.z, a group of
	 * this process's own) and detaches; an RC QP, a unicast GID and a second detach are
	 * EINVAL. */
	{
		struct ibv_device_attr da;
		struct ibv_qp_init_attr ia = {
			.send_cq = p.cq, .recv_cq = p.cq, .qp_type = IBV_QPT_UD,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		struct ibv_qp *ud = ibv_create_qp(p.pd, &ia);
		union ibv_gid mgid = { .raw = { [10] = 0xff, [11] = 0xff, [12] = 239, [13] = 71,
						[14] = (uint8_t)(getpid() >> 8), [15] = (uint8_t)getpid() | 1 } };
		union ibv_gid ucast = mgid;

		ucast.raw[12] = 127;
		CHECK(ibv_query_device(p.ctx, &da) == 0 && da.max_mcast_grp > 0 && da.max_mcast_qp_attach > 0,
		      "device advertises multicast");
		CHECK(ud, "create UD QP");
		CHECK(ibv_attach_mcast(ud, &mgid, 0) == 0, "attach_mcast");
		CHECK(ibv_detach_mcast(ud, &mgid, 0) == 0, "detach_mcast");
		CHECK(ibv_detach_mcast(ud, &mgid, 0) == EINVAL, "second detach_mcast: EINVAL");
		CHECK(ibv_attach_mcast(ud, &ucast, 0) == EINVAL, "attach_mcast to a unicast GID: EINVAL");
		CHECK(ibv_attach_mcast(p.a, &mgid, 0) == EINVAL, "attach_mcast of an RC QP: EINVAL");
		CHECK(ibv_destroy_qp(ud) == 0, "destroy UD QP");
	}
	teardown(&p);
}

/* wait for n completions, all successful; returns how many were receives. */
static int await(struct pair *p, int n)
{
	struct ibv_wc wc;
	int recvs = 0, got;

	while (n > 0) {
		got = ibv_poll_cq(p->cq, 1, &wc);
		CHECK(got >= 0, "poll CQ");
		if (got == 0)
			continue;
		CHECK(wc.status == IBV_WC_SUCCESS, "inline completion status");
		recvs += wc.opcode == IBV_WC_RECV;
		n--;
	}
	return recvs;
}

static void post_recv_at(struct pair *p, size_t off)
{
	struct ibv_sge rsge = { .addr = (uintptr_t)p->buf + off, .length = 128, .lkey = p->mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = off, .sg_list = &rsge, .num_sge = 1 }, *rbad;

	CHECK(ibv_post_recv(p->b, &rwr, &rbad) == 0, "post recv");
}

/*
 * Inline sends name a stack buffer with lkey 0, which is scribbled over as soon as the
 * post returns: the bytes that arrive are the ones the post saw.
 */
static void check_inline(void)
{
	struct pair p;
	char data[1024];
	struct ibv_sge sge = { .addr = (uintptr_t)data, .length = 0, .lkey = 0 };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED },
			   *bad = NULL;
	struct ibv_qp_ex *x;

	setup(&p, 1);
	memcpy(data, "inline SEND from the stack", 27);
	sge.length = 27;
	wr.opcode = IBV_WR_SEND;
	post_recv_at(&p, 4096);
	CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post inline SEND, lkey 0");
	memset(data, 'x', sizeof(data));
	CHECK(await(&p, 2) == 1, "inline SEND completions");
	CHECK(memcmp(p.buf + 4096, "inline SEND from the stack", 27) == 0, "inline SEND bytes");

	memcpy(data, "inline WRITE from the stack", 28);
	sge.length = 28;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)p.buf + 4096 + 256;
	wr.wr.rdma.rkey = p.mr->rkey;
	CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post inline WRITE, lkey 0");
	memset(data, 'x', sizeof(data));
	CHECK(await(&p, 1) == 0, "inline WRITE completion");
	CHECK(memcmp(p.buf + 4096 + 256, "inline WRITE from the stack", 28) == 0, "inline WRITE bytes");

	{
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qia;

		CHECK(ibv_query_qp(p.a, &qa, IBV_QP_CAP, &qia) == 0 && qia.cap.max_inline_data < sizeof(data),
		      "query QP");
		sge.length = qia.cap.max_inline_data + 1;
	}
	bad = NULL;
	CHECK(ibv_post_send(p.a, &wr, &bad) == EINVAL && bad == &wr, "inline beyond max_inline_data: EINVAL");

	/* ibv_qp_ex: a WRITE and a SEND of two pieces in one batch, each copied at the call. */
	x = ibv_qp_to_qp_ex(p.a);
	CHECK(x, "qp_to_qp_ex");
	post_recv_at(&p, 4096 + 512);
	ibv_wr_start(x);
	x->wr_id = 21;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, p.mr->rkey, (uintptr_t)p.buf + 4096 + 768);
	memcpy(data, "wr_set_inline_data", 19);
	ibv_wr_set_inline_data(x, data, 19);
	memset(data, 'x', sizeof(data));
	x->wr_id = 22;
	ibv_wr_send(x);
	{
		char one[8] = "two ", two[8] = "pieces";
		struct ibv_data_buf bufs[2] = { { one, 4 }, { two, 7 } };

		ibv_wr_set_inline_data_list(x, 2, bufs);
		memset(one, 'x', sizeof(one));
		memset(two, 'x', sizeof(two));
	}
	CHECK(ibv_wr_complete(x) == 0, "wr_complete of inline WRs");
	CHECK(await(&p, 3) == 1, "wr_* inline completions");
	CHECK(memcmp(p.buf + 4096 + 768, "wr_set_inline_data", 19) == 0, "wr_set_inline_data bytes");
	CHECK(memcmp(p.buf + 4096 + 512, "two pieces", 11) == 0, "wr_set_inline_data_list bytes");

	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, data, sizeof(data));
	CHECK(ibv_wr_complete(x) == EINVAL, "wr_set_inline_data beyond max_inline_data: EINVAL");
	teardown(&p);
}

static void check_fork(void)
{
	pid_t pid = fork();
	int status;

	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		alarm(10); /* a hang is the failure this guards against */
		errno = 0;
		if (ibv_get_device_list(NULL) == NULL && errno == ENOSYS)
			_exit(0);
		_exit(1);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "child after fork: get_device_list fails with ENOSYS");
}

/* The C flavour: the parent keeps working after fork(), and the child may open the device anew. */
static void check_fork_attached(void)
{
	struct pair p;
	pid_t pid;
	int status;

	setup(&p, 1);
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		struct ibv_device **list;
		struct ibv_context *ctx;
		struct ibv_device_attr da;
		struct ibv_port_attr pa;
		union ibv_gid gid;
		struct ibv_pd *pd;
		struct ibv_mr *mr;
		void *mem;

		alarm(10); /* a hang is a failure too */
		errno = 0;
		if (ibv_alloc_pd(p.ctx) != NULL || errno != EIO)
			_exit(2); /* the parent's context is not the child's */
		list = ibv_get_device_list(NULL);
		if (!list || !list[0])
			_exit(3);
		ctx = ibv_open_device(list[0]);
		ibv_free_device_list(list);
		if (!ctx)
			_exit(4);
		if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, 1, &pa) || pa.state != IBV_PORT_ACTIVE ||
		    ibv_query_gid(ctx, 1, 0, &gid) || gid.raw[10] != 0xff)
			_exit(5);
		pd = ibv_alloc_pd(ctx);
		mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (!pd || mem == MAP_FAILED)
			_exit(6);
		strcpy(mem, "the child's");
		mr = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
		if (!mr || strcmp(mem, "the child's") != 0 || ibv_dereg_mr(mr) || strcmp(mem, "the child's") != 0)
			_exit(7);
		if (ibv_dealloc_pd(pd) || ibv_close_device(ctx))
			_exit(8);
		_exit(0);
	}
	for (int i = 0; i < 100; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)p.buf, .length = 32, .lkey = p.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		snprintf((char *)p.buf, 32, "after fork %d", i);
		post_recv_at(&p, 4096);
		CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post SEND after fork");
		CHECK(await(&p, 2) == 1, "SEND completions after fork");
		CHECK(memcmp(p.buf, p.buf + 4096, 32) == 0, "SEND bytes after fork");
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "child after fork exits");
	if (WEXITSTATUS(status) != 0)
		fprintf(stderr, "child after fork: exit %d\n", WEXITSTATUS(status));
	CHECK(WEXITSTATUS(status) == 0, "child after fork opens the device anew");
	teardown(&p);
}

static void *idle_thread(void *arg)
{
	char c;

	return (void *)(intptr_t)read(*(int *)arg, &c, 1);
}

/*
 * The C flavour moves registered pages onto shared memory: pages a buffer shares with
 * other data only while the program has one thread, which cannot write them meanwhile.
 */
static void check_partial_pages(void)
{
	struct pair p;
	char *m = malloc(100);
	struct ibv_mr *mr;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	pthread_t t;
	int pfd[2];

	setup(&p, 1);
	CHECK(m, "malloc");
	strcpy(m, "partial page");
	mr = ibv_reg_mr(p.pd, m, 100, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr && strcmp(m, "partial page") == 0, "reg_mr of a malloc'd buffer in a program of one thread");
	strcpy((char *)p.buf, "written into the heap");
	sge = (struct ibv_sge){ .addr = (uintptr_t)p.buf, .length = 22, .lkey = p.mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)m;
	wr.wr.rdma.rkey = mr->rkey;
	CHECK(ibv_post_send(p.a, &wr, &bad) == 0 && await(&p, 1) == 0, "WRITE into the malloc'd buffer");
	CHECK(strcmp(m, "written into the heap") == 0, "WRITE landed in the heap");
	CHECK(ibv_dereg_mr(mr) == 0 && strcmp(m, "written into the heap") == 0, "dereg keeps the bytes");
	free(m);

	/* shared memory cannot move without leaving its sharers */
	{
		void *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

		CHECK(sh != MAP_FAILED, "mmap shared");
		errno = 0;
		CHECK(!ibv_reg_mr(p.pd, sh, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
		      "reg_mr of a MAP_SHARED mapping: EINVAL");
		munmap(sh, 4096);
	}

	CHECK(pipe(pfd) == 0 && pthread_create(&t, NULL, idle_thread, &pfd[0]) == 0, "a second thread");
	m = malloc(100);
	errno = 0;
	CHECK(!ibv_reg_mr(p.pd, m, 100, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	      "reg_mr of a malloc'd buffer in a program of two threads: EINVAL");
	close(pfd[1]);
	pthread_join(t, NULL);
	close(pfd[0]);
	free(m);
	teardown(&p);
}

/*
 * Posting limits the C flavour checks itself: SGEs beyond max_send_sge even with
 * IBV_SEND_INLINE on an opcode that is not inlined, an opcode the device has not, and
 * the receive beyond max_recv_wr (ENOMEM), until a poll frees one.
 */
static void check_post_limits(void)
{
	struct pair p;
	struct ibv_sge sges[2] = { { .addr = 0, .length = 8 }, { .addr = 0, .length = 8 } };
	struct ibv_send_wr wr = { .sg_list = sges, .num_sge = 2, .opcode = IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED }, *bad = NULL;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge rsge;
	int i;

	setup(&p, 1);
	sges[0].addr = sges[1].addr = (uintptr_t)p.buf;
	sges[0].lkey = sges[1].lkey = p.mr->lkey;
	CHECK(ibv_post_send(p.a, &wr, &bad) == EINVAL && bad == &wr, "READ with 2 SGEs (max 1), INLINE: EINVAL");
	wr.num_sge = 1;
	wr.opcode = 77;
	bad = NULL;
	CHECK(ibv_post_send(p.a, &wr, &bad) == EINVAL && bad == &wr, "opcode 77: EINVAL");
	rsge = (struct ibv_sge){ .addr = (uintptr_t)p.buf + 4096, .length = 64, .lkey = p.mr->lkey };
	rwr = (struct ibv_recv_wr){ .sg_list = &rsge, .num_sge = 1 };
	for (i = 0; i < 64; i++)
		CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0, "post recv up to max_recv_wr");
	CHECK(ibv_post_recv(p.b, &rwr, &rbad) == ENOMEM && rbad == &rwr, "recv beyond max_recv_wr: ENOMEM");
	/* one SEND takes one receive; its completion, polled, makes room for one more */
	sges[0].length = 8;
	wr = (struct ibv_send_wr){ .sg_list = sges, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	CHECK(ibv_post_send(p.a, &wr, &bad) == 0 && await(&p, 2) == 1, "SEND into the full receive queue");
	CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0, "post recv after a receive completed");
	CHECK(ibv_post_recv(p.b, &rwr, &rbad) == ENOMEM, "and full again");
	teardown(&p);
}

/* maps_inode is the inode of the mapping holding addr in /proc/self/maps (-1: none). */
static long maps_inode(void *addr)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	long ino = -1;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long a, b, i;
		char perms[8], dev[16];
		unsigned long long off;

		if (sscanf(line, "%lx-%lx %7s %llx %15s %lu", &a, &b, perms, &off, dev, &i) == 6 &&
		    (uintptr_t)addr >= a && (uintptr_t)addr < b)
			ino = (long)i;
	}
	if (f)
		fclose(f);
	return ino;
}

/*
 * Registered pages are on shared memory (a memfd) while registered, and private
 * anonymous memory again after ibv_dereg_mr, or when the context closes with the region
 * still registered.
 */
static void check_pages_go_back(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	char *buf = aligned_alloc(4096, 8192);

	ibv_free_device_list(list);
	CHECK(ctx && buf, "open device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc PD");
	strcpy(buf, "kept");
	CHECK(maps_inode(buf) == 0, "a heap buffer is anonymous memory");
	mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && maps_inode(buf) > 0 && strcmp(buf, "kept") == 0, "a registered buffer is on a memfd");
	CHECK(ibv_dereg_mr(mr) == 0 && maps_inode(buf) == 0 && strcmp(buf, "kept") == 0, "dereg moves it back");
	mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && maps_inode(buf) > 0, "registered again");
	/* closed with the region registered (and the PD allocated), as a program may exit */
	CHECK(ibv_close_device(ctx) == 0, "close device");
	CHECK(maps_inode(buf) == 0 && strcmp(buf, "kept") == 0, "close moves the pages back");
	free(buf);
}

/* Four threads on one context: commands and posts at once, each on QPs of its own. */
struct worker {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int id;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct pair p = { .ctx = w->ctx, .pd = w->pd };
	union ibv_gid gid;

	CHECK(ibv_query_gid(p.ctx, 1, 0, &gid) == 0, "thread: query GID");
	p.cq = ibv_create_cq(p.ctx, 128, NULL, NULL, 0);
	p.buf = aligned_alloc(4096, 8192);
	CHECK(p.cq && p.buf, "thread: CQ and buffer");
	memset(p.buf, 0, 8192);
	p.mr = ibv_reg_mr(p.pd, p.buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(p.mr, "thread: reg MR");
	p.a = make_qp(&p);
	p.b = make_qp(&p);
	to_state(p.a, p.b, &gid, IBV_QPS_INIT);
	to_state(p.a, p.b, &gid, IBV_QPS_RTR);
	to_state(p.a, p.b, &gid, IBV_QPS_RTS);
	to_state(p.b, p.a, &gid, IBV_QPS_INIT);
	to_state(p.b, p.a, &gid, IBV_QPS_RTR);
	to_state(p.b, p.a, &gid, IBV_QPS_RTS);
	for (int i = 0; i < 200; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)p.buf, .length = 64, .lkey = p.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = i % 2 ? IBV_WR_SEND : IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		wr.wr.rdma.remote_addr = (uintptr_t)p.buf + 4096;
		wr.wr.rdma.rkey = p.mr->rkey;
		snprintf((char *)p.buf, 64, "thread %d message %d", w->id, i);
		if (i % 2)
			post_recv_at(&p, 4096);
		CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "thread: post");
		CHECK(await(&p, i % 2 ? 2 : 1) == i % 2, "thread: completions");
		CHECK(memcmp(p.buf, p.buf + 4096, 64) == 0, "thread: bytes");
	}
	CHECK(ibv_destroy_qp(p.a) == 0 && ibv_destroy_qp(p.b) == 0 && ibv_dereg_mr(p.mr) == 0 &&
	      ibv_destroy_cq(p.cq) == 0, "thread: destroy");
	free(p.buf);
	return NULL;
}

static void check_threads(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct worker w[4];
	pthread_t t[4];
	struct ibv_context *ctx;
	struct ibv_pd *pd;

	CHECK(list && list[0], "a device");
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	CHECK(ctx, "open device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc PD");
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .ctx = ctx, .pd = pd, .id = i };
		CHECK(pthread_create(&t[i], NULL, work, &w[i]) == 0, "pthread_create");
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "close");
}

/* The daemon's death: IBV_EVENT_DEVICE_FATAL, then EIO, never a hang. */
static int check_fatal(void)
{
	struct pair p;
	struct ibv_async_event ev;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;

	setup(&p, 1);
	printf("ready\n");
	fflush(stdout);
	alarm(20);
	do
		CHECK(ibv_get_async_event(p.ctx, &ev) == 0, "get_async_event");
	while (ev.event_type != IBV_EVENT_DEVICE_FATAL);
	ibv_ack_async_event(&ev);
	errno = 0;
	CHECK(!ibv_alloc_pd(p.ctx) && errno == EIO, "alloc_pd after the daemon's death: EIO");
	sge = (struct ibv_sge){ .addr = (uintptr_t)p.buf, .length = 8, .lkey = p.mr->lkey };
	wr = (struct ibv_send_wr){ .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND };
	CHECK(ibv_post_send(p.a, &wr, &bad) == EIO, "post_send after the daemon's death: EIO");
	/* everything still closes, and the pages go back to private memory */
	teardown(&p);
	printf("fatal ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "fatal") == 0)
		return check_fatal();
	if ((argc == 3 || (argc == 4 && strcmp(argv[3], "inline") == 0)) && strcmp(argv[1], "bench") == 0)
		return bench(atol(argv[2]), argc == 4);
	check_bad_arguments();
	check_traffic();
	check_inline();
	if (argc == 2 && strcmp(argv[1], "attached") == 0) {
		check_fork_attached();
		check_partial_pages();
		check_post_limits();
		check_pages_go_back();
		check_threads();
	} else
		check_fork();
	printf("ok\n");
	return 0;
}
