/*
 * rdmacm_check ADDR: goverbs' librdmacm.so.1 given bad input, on an attached device
 * whose address is ADDR: NULL and garbage arguments, events acked twice, ids destroyed
 * with events outstanding, a channel destroyed under a waiting rdma_get_cm_event, calls
 * that are not served. Each must fail with a clear errno (or behave as librdmacm
 * documents) and nothing may crash or hang. Prints "ok" when all hold.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

static int failures;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "line %d: ", __LINE__);            \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
			failures++;                                        \
		}                                                          \
	} while (0)

/* FAILS: the call returned -1 with errno e. */
#define FAILS(call, e)                                                                  \
	do {                                                                            \
		errno = 0;                                                              \
		int rc_ = (call);                                                       \
		CHECK(rc_ == -1 && errno == (e), "%s: rc %d, want -1 with errno %s", #call, rc_, #e); \
	} while (0)

static struct sockaddr_in addr;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct waiter {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	volatile int done;
	double at;
};

static void *destroyer(void *arg)
{
	struct waiter *w = arg;

	rdma_destroy_id(w->id);
	w->at = now();
	w->done = 1;
	return NULL;
}

static void *getter(void *arg)
{
	struct waiter *w = arg;
	struct rdma_cm_event *e;

	w->done = 1; /* about to block */
	if (rdma_get_cm_event(w->ch, &e) == 0)
		rdma_ack_cm_event(e);
	w->done = 2;
	return NULL;
}

/* resolved makes an id on ch with its address resolved (ADDR_RESOLVED queued, not taken). */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = NULL;

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&addr, 1000) == 0, "rdma_resolve_addr");
	return id;
}

/* next is the next event of ch, of type want (else a failed check and NULL). */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e = NULL;
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	if (poll(&p, 1, 10000) != 1) {
		CHECK(0, "no event, want %s", rdma_event_str(want));
		return NULL;
	}
	if (rdma_get_cm_event(ch, &e)) {
		CHECK(0, "rdma_get_cm_event, want %s", rdma_event_str(want));
		return NULL;
	}
	CHECK(e->event == want, "event %s (status %d), want %s", rdma_event_str(e->event), e->status, rdma_event_str(want));
	return e;
}

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4, .max_recv_wr = 4,
								      .max_send_sge = 1, .max_recv_sge = 1 } };
	return a;
}

/* client is an RC id on ch resolved to dst, with a QP of qp_attr's from rdma_create_qp. */
static struct rdma_cm_id *client(struct rdma_event_channel *ch, const struct sockaddr_in *dst)
{
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_cm_event *e;
	struct rdma_cm_id *c;

	CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0, "client id");
	CHECK(rdma_resolve_addr(c, NULL, (struct sockaddr *)dst, 1000) == 0, "resolve");
	if ((e = next(ch, RDMA_CM_EVENT_ADDR_RESOLVED)))
		rdma_ack_cm_event(e);
	CHECK(rdma_resolve_route(c, 1000) == 0, "route");
	if ((e = next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		rdma_ack_cm_event(e);
	CHECK(rdma_create_qp(c, NULL, &qa) == 0 && c->qp && c->send_cq && c->recv_cq && c->pd, "rdma_create_qp");
	return c;
}

/*
 * connections: a listener and a client in this process on one device: private data
 * and parameters in CONNECT_REQUEST, a reject's reason and private data in REJECTED,
 * an accept's private data in ESTABLISHED, DISCONNECTED on both sides.
 */
static void connections(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *e;
	struct sockaddr_in la = addr;
	struct ibv_qp_init_attr qa;
	const char hello[] = "hello from the client", no[] = "no thanks", yes[] = "welcome";

	CHECK(fcntl(ch->fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	la.sin_port = htons(7998);
	CHECK(rdma_create_id(ch, &l, (void *)0x1234, RDMA_PS_TCP) == 0, "listener");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&la) == 0, "bind");
	CHECK(rdma_get_src_port(l) == htons(7998), "rdma_get_src_port %u", ntohs(rdma_get_src_port(l)));
	CHECK(rdma_listen(l, 4) == 0, "listen");
	/* no one listens on another port: REJECTED */
	{
		struct sockaddr_in none = la;
		none.sin_port = htons(7997);
		c = client(ch, &none);
		CHECK(rdma_connect(c, NULL) == 0, "connect");
		if ((e = next(ch, RDMA_CM_EVENT_REJECTED))) {
			CHECK(e->status != 0 && e->id == c, "REJECTED status %d", e->status);
			rdma_ack_cm_event(e);
		}
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	for (int round = 0; round < 2; round++) {
		struct rdma_conn_param p = { .private_data = hello, .private_data_len = sizeof(hello),
					     .responder_resources = 1, .initiator_depth = 1, .retry_count = 5, .rnr_retry_count = 6 };

		c = client(ch, &la);
		CHECK(rdma_connect(c, &p) == 0, "connect");
		if (!(e = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST)))
			return;
		s = e->id;
		CHECK(e->listen_id == l && s != l && s->context == (void *)0x1234 && s->verbs == l->verbs,
		      "CONNECT_REQUEST's ids and context");
		CHECK(e->param.conn.private_data_len >= sizeof(hello) &&
			      !memcmp(e->param.conn.private_data, hello, sizeof(hello)),
		      "CONNECT_REQUEST's private data (%u bytes)", e->param.conn.private_data_len);
		CHECK(e->param.conn.rnr_retry_count == 6 && e->param.conn.qp_num == c->qp->qp_num,
		      "CONNECT_REQUEST's parameters: rnr %u qpn %u", e->param.conn.rnr_retry_count, e->param.conn.qp_num);
		CHECK(rdma_get_dst_port(s) == rdma_get_src_port(c), "the request's peer port");
		rdma_ack_cm_event(e);
		if (round == 0) {
			CHECK(rdma_reject(s, no, sizeof(no)) == 0, "reject");
			if ((e = next(ch, RDMA_CM_EVENT_REJECTED))) {
				CHECK(e->id == c && e->status == 28, "REJECTED status %d, want 28 (consumer)", e->status);
				CHECK(e->param.conn.private_data_len >= sizeof(no) &&
					      !memcmp(e->param.conn.private_data, no, sizeof(no)),
				      "REJECTED's private data");
				rdma_ack_cm_event(e);
			}
			rdma_destroy_id(s);
			rdma_destroy_qp(c);
			rdma_destroy_id(c);
			continue;
		}
		qa = qp_attr();
		CHECK(rdma_create_qp(s, NULL, &qa) == 0, "server QP");
		struct rdma_conn_param ap = { .private_data = yes, .private_data_len = sizeof(yes) };
		CHECK(rdma_accept(s, &ap) == 0, "accept");
		for (int k = 0; k < 2; k++) {
			if (!(e = next(ch, RDMA_CM_EVENT_ESTABLISHED)))
				break;
			if (e->id == c)
				CHECK(e->param.conn.private_data_len >= sizeof(yes) &&
					      !memcmp(e->param.conn.private_data, yes, sizeof(yes)),
				      "ESTABLISHED's private data (the accept's)");
			else
				CHECK(e->id == s, "ESTABLISHED of another id");
			rdma_ack_cm_event(e);
		}
		struct ibv_qp_attr qattr;
		struct ibv_qp_init_attr qinit;
		CHECK(ibv_query_qp(c->qp, &qattr, IBV_QP_STATE, &qinit) == 0 && qattr.qp_state == IBV_QPS_RTS,
		      "the client's QP is in RTS");
		CHECK(ibv_query_qp(s->qp, &qattr, IBV_QP_STATE, &qinit) == 0 && qattr.qp_state == IBV_QPS_RTS,
		      "the server's QP is in RTS");
		CHECK(rdma_disconnect(c) == 0, "disconnect");
		for (int k = 0; k < 2; k++) {
			if (!(e = next(ch, RDMA_CM_EVENT_DISCONNECTED)))
				break;
			rdma_ack_cm_event(e);
		}
		rdma_destroy_qp(s);
		rdma_destroy_id(s);
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	rdma_destroy_id(l);
	/* drain what is left (TIMEWAIT_EXIT of destroyed ids never comes) */
	while (rdma_get_cm_event(ch, &e) == 0)
		rdma_ack_cm_event(e);
	rdma_destroy_event_channel(ch);
}

/*
 * anybinds: as on the kernel's rdma_cm, an id bound to the any address, or to a loopback
 * address no device has (cma_any_addr), has no device (id->verbs NULL) yet holds its port:
 * it listens (its requests' ids have the device), and a resolve gives it the device
 * (libfabric's verbs provider binds "localhost" and takes the device's addresses when
 * id->verbs is NULL). And rdma_migrate_id of a synchronous id whose last event the
 * program never acked (libfabric moves its endpoints' ids so) acks it, as librdmacm does,
 * rather than wait for ever.
 */
static void anybinds(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in any = { .sin_family = AF_INET };
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_cm_id *l, *c, *id;
	struct rdma_cm_event *e;

	CHECK(ch && fcntl(ch->fd, F_SETFL, O_NONBLOCK) == 0, "channel");
	CHECK(addr.sin_addr.s_addr != lo.sin_addr.s_addr, "the device's address is 127.0.0.1: pick another");
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0, "listener");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&lo) == 0, "bind to 127.0.0.1");
	CHECK(l->verbs == NULL && l->pd == NULL, "an id bound to 127.0.0.1 has a device");
	CHECK(rdma_get_src_port(l) != 0 && rdma_get_local_addr(l)->sa_family == AF_INET &&
		      ((struct sockaddr_in *)rdma_get_local_addr(l))->sin_addr.s_addr == lo.sin_addr.s_addr,
	      "the bound address: port %u", ntohs(rdma_get_src_port(l)));
	FAILS(rdma_create_qp(l, NULL, &qa), EINVAL); /* no device yet */
	CHECK(rdma_listen(l, 4) == 0 && l->verbs == NULL, "listen on 127.0.0.1");
	{
		struct sockaddr_in dst = addr;

		dst.sin_port = rdma_get_src_port(l);
		c = client(ch, &dst);
		CHECK(rdma_connect(c, NULL) == 0, "connect to the device's address, the listener's port");
		if ((e = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST))) {
			CHECK(e->listen_id == l && e->id->verbs == c->verbs && e->id->pd != NULL,
			      "the request's id has the device");
			id = e->id;
			rdma_ack_cm_event(e);
			CHECK(rdma_reject(id, NULL, 0) == 0, "reject");
			if ((e = next(ch, RDMA_CM_EVENT_REJECTED)))
				rdma_ack_cm_event(e);
			rdma_destroy_id(id);
		}
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	rdma_destroy_id(l);
	while (rdma_get_cm_event(ch, &e) == 0)
		rdma_ack_cm_event(e);

	/* the any address: no device until the resolve */
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "sync id");
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&any) == 0 && id->verbs == NULL && rdma_get_src_port(id) != 0,
	      "bind to the any address");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&addr, 1000) == 0 && id->verbs != NULL && id->pd != NULL,
	      "the resolve gives the id its device");
	/* rdma_migrate_id of a synchronous id, its ADDR_RESOLVED (id->event) not acked */
	alarm(20); /* a wait for ever would end the program */
	CHECK(id->event != NULL && rdma_migrate_id(id, ch) == 0 && id->channel == ch && id->event == NULL,
	      "rdma_migrate_id of a synchronous id");
	alarm(0);
	CHECK(rdma_resolve_route(id, 1000) == 0, "resolve the route");
	if ((e = next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		rdma_ack_cm_event(e);
	CHECK(rdma_destroy_id(id) == 0, "destroy the moved id");
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "sync id");
	FAILS(rdma_migrate_id(id, NULL), EINVAL); /* synchronous already */
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *e, *e2;
	struct rdma_cm_id *id;
	struct rdma_cm_id fake;
	struct pollfd pfd;

	if (argc != 2 || inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
		fprintf(stderr, "usage: rdmacm_check IPV4ADDR\n");
		return 2;
	}
	addr.sin_family = AF_INET;
	addr.sin_port = htons(7999);

	/* NULL and garbage arguments */
	FAILS(rdma_create_id(NULL, NULL, NULL, RDMA_PS_TCP), EINVAL);
	FAILS(rdma_get_cm_event(NULL, &e), EINVAL);
	FAILS(rdma_ack_cm_event(NULL), EINVAL);
	FAILS(rdma_destroy_id(NULL), EINVAL);
	memset(&fake, 0x5a, sizeof(fake));
	FAILS(rdma_destroy_id(&fake), EINVAL);
	FAILS(rdma_bind_addr(&fake, (struct sockaddr *)&addr), EINVAL);
	FAILS(rdma_resolve_addr(&fake, NULL, (struct sockaddr *)&addr, 100), EINVAL);
	FAILS(rdma_connect(&fake, NULL), EINVAL);
	FAILS(rdma_accept(NULL, NULL), EINVAL);
	FAILS(rdma_listen((struct rdma_cm_id *)&addr, 1), EINVAL);
	FAILS(rdma_ack_cm_event((struct rdma_cm_event *)&fake), EINVAL);
	FAILS(rdma_notify(NULL, IBV_EVENT_COMM_EST), EINVAL);
	FAILS(rsocket(AF_INET, SOCK_SEQPACKET, 0), ENOTSUP);
	FAILS(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP), ENOTSUP);
	FAILS(rsocket(AF_UNIX, SOCK_STREAM, 0), ENOTSUP);
	FAILS((int)rsend(-1, "x", 1, 0), EBADF);
	FAILS((int)rrecv(12345, &addr, 1, 0), EBADF);
	FAILS(rclose(-1), EBADF);
	FAILS((int)riomap(-1, &addr, 1, PROT_WRITE, 0, -1), EBADF);
	{
		/* an rsocket not connected: no data, no peer; closes cleanly */
		int rs = rsocket(AF_INET, SOCK_STREAM, 0);
		socklen_t len = sizeof(addr);
		struct sockaddr_in peer;

		CHECK(rs >= 0, "rsocket: %s", strerror(errno));
		FAILS((int)rsend(rs, "x", 1, 0), ENOTCONN);
		FAILS((int)rrecv(rs, &peer, 1, MSG_DONTWAIT), ENOTCONN);
		FAILS(rgetpeername(rs, (struct sockaddr *)&peer, &len), ENOTCONN);
		FAILS(rsetsockopt(rs, SOL_RDMA, RDMA_INLINE, &len, sizeof(len)), ENOPROTOOPT);
		FAILS(raccept(rs, NULL, NULL), EINVAL);
		CHECK(rclose(rs) == 0, "rclose: %s", strerror(errno));
	}
	FAILS(rdma_set_local_ece(NULL, NULL), EOPNOTSUPP);

	ch = rdma_create_event_channel();
	CHECK(ch != NULL, "rdma_create_event_channel");
	FAILS(rdma_get_cm_event(ch, NULL), EINVAL);
	FAILS(rdma_create_id(ch, &id, NULL, RDMA_PS_IB), EPROTONOSUPPORT);
	/* IPoIB's port space: UD ids, as librdmacm makes them */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_IPOIB) == 0, "rdma_create_id IPoIB: %s", strerror(errno));
	CHECK(id->qp_type == IBV_QPT_UD && id->ps == RDMA_PS_IPOIB, "IPoIB id: qp_type %d", id->qp_type);
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id IPoIB");
	FAILS(rdma_create_id((struct rdma_event_channel *)&fake, &id, NULL, RDMA_PS_TCP), EINVAL);

	/* an id before it has a device, and calls in the wrong state */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	FAILS(rdma_bind_addr(id, NULL), EINVAL);
	FAILS(rdma_resolve_route(id, 100), EINVAL);
	FAILS(rdma_connect(id, NULL), EINVAL);
	FAILS(rdma_disconnect(id), EINVAL);
	{
		struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC, .cap = { 1, 1, 1, 1, 0 } };
		FAILS(rdma_create_qp(id, NULL, &qa), EINVAL);
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
		int mask;
		FAILS(rdma_init_qp_attr(id, &a, &mask), EINVAL);
	}
	{
		int one = 1;
		uint8_t t = 0;
		CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) == 0, "REUSEADDR");
		uint8_t big = 32;
		FAILS(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &big, sizeof(big)), EINVAL);
		FAILS(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(one)), EINVAL);
		FAILS(rdma_set_option(id, RDMA_OPTION_ID, 99, &t, sizeof(t)), ENOSYS);
		FAILS(rdma_notify(id, IBV_EVENT_COMM_EST), EINVAL); /* no connection */
		FAILS(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &t, sizeof(t)), ENOSYS);
	}
	{
		struct sockaddr_in other = addr;
		other.sin_addr.s_addr = htonl(0x0a0b0c0d); /* no device has it */
		FAILS(rdma_bind_addr(id, (struct sockaddr *)&other), EADDRNOTAVAIL);
	}
	FAILS(rdma_leave_multicast(id, (struct sockaddr *)&addr), EADDRNOTAVAIL);
	/* a TCP id joins no group */
	FAILS(rdma_join_multicast(id, (struct sockaddr *)&addr, NULL), EINVAL);
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
	FAILS(rdma_destroy_id(id), EINVAL); /* destroyed twice */

	/* the channel's fd: O_NONBLOCK gives EAGAIN, and it is pollable */
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	FAILS(rdma_get_cm_event(ch, &e), EAGAIN);
	id = resolved(ch);
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	CHECK(poll(&pfd, 1, 5000) == 1 && (pfd.revents & POLLIN), "poll the channel");
	CHECK(rdma_get_cm_event(ch, &e) == 0 && e->event == RDMA_CM_EVENT_ADDR_RESOLVED && e->id == id,
	      "ADDR_RESOLVED");
	CHECK(rdma_get_local_addr(id)->sa_family == AF_INET && id->verbs != NULL && id->port_num == 1,
	      "the resolved id's address and device");
	CHECK(!strcmp(rdma_event_str(e->event), "RDMA_CM_EVENT_ADDR_RESOLVED"), "rdma_event_str");

	/* destroying an id waits until its events are acked */
	struct waiter w = { .ch = ch, .id = id };
	pthread_t t;
	pthread_create(&t, NULL, destroyer, &w);
	usleep(200 * 1000);
	CHECK(!w.done, "rdma_destroy_id returned with an event not acked");
	double acked = now();
	CHECK(rdma_ack_cm_event(e) == 0, "rdma_ack_cm_event");
	pthread_join(t, NULL);
	CHECK(w.done && w.at >= acked, "rdma_destroy_id returned before the ack");
	/* acked twice */
	FAILS(rdma_ack_cm_event(e), EINVAL);

	/* an id destroyed with its event still queued: the event goes with it */
	id = resolved(ch);
	usleep(100 * 1000);
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id with an event queued");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &e2) == -1 && errno == EAGAIN, "an event of a destroyed id was delivered");

	/* rdma_migrate_id: the id's unread event moves with it to the new channel */
	{
		struct rdma_event_channel *ch2 = rdma_create_event_channel();
		struct pollfd p2 = { .fd = ch2 ? ch2->fd : -1, .events = POLLIN };

		id = resolved(ch);
		usleep(100 * 1000);
		CHECK(rdma_migrate_id(id, ch2) == 0 && id->channel == ch2, "rdma_migrate_id");
		errno = 0;
		CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN, "the old channel still had the event");
		CHECK(poll(&p2, 1, 5000) == 1, "poll the new channel");
		CHECK(rdma_get_cm_event(ch2, &e) == 0 && e->id == id && e->event == RDMA_CM_EVENT_ADDR_RESOLVED,
		      "the event on the new channel");
		rdma_ack_cm_event(e);
		FAILS(rdma_migrate_id(id, (struct rdma_event_channel *)&fake), EINVAL);
		CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
		rdma_destroy_event_channel(ch2);
	}

	/* a channel destroyed with ids on it stays for them, and goes with the last one */
	{
		struct rdma_event_channel *ch3 = rdma_create_event_channel();
		struct pollfd p3 = { .fd = ch3 ? ch3->fd : -1, .events = POLLIN };

		id = resolved(ch3);
		errno = 0;
		rdma_destroy_event_channel(ch3);
		CHECK(errno == EBUSY, "rdma_destroy_event_channel with an id: errno %d, want EBUSY", errno);
		CHECK(poll(&p3, 1, 5000) == 1, "poll after the refused destroy");
		CHECK(rdma_get_cm_event(ch3, &e) == 0, "the channel still works for its id");
		rdma_ack_cm_event(e);
		CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
		FAILS(rdma_get_cm_event(ch3, &e), EINVAL); /* gone with its last id */
	}

	/* a channel destroyed under a waiting rdma_get_cm_event: as on the kernel's rdma_cm, the waiter stays blocked */
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK) == 0, "blocking");
	struct waiter g = { .ch = ch };
	pthread_create(&t, NULL, getter, &g);
	while (!g.done)
		usleep(1000);
	usleep(100 * 1000);
	rdma_destroy_event_channel(ch);
	FAILS(rdma_get_cm_event(ch, &e), EINVAL); /* the channel is gone */
	usleep(100 * 1000);
	CHECK(g.done == 1, "the waiter returned from a destroyed channel");

	/* synchronous ids (NULL channel): calls wait for their events */
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id sync");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&addr, 1000) == 0, "sync rdma_resolve_addr");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED, "sync id's event");
	CHECK(rdma_resolve_route(id, 1000) == 0 && id->route.num_paths == 1, "sync rdma_resolve_route");
	FAILS(rdma_get_request(id, &id), EINVAL); /* not a listener's... nor asked right */
	{
		/* a QP destroyed behind the id's back (ibv_destroy_qp, as rping does) is never touched again */
		struct ibv_qp_init_attr qa = qp_attr();
		CHECK(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp");
		CHECK(ibv_destroy_qp(id->qp) == 0, "ibv_destroy_qp");
		FAILS(rdma_connect(id, NULL), EINVAL); /* no QP: qp_num 0 is not ours */
		rdma_destroy_qp(id);
		CHECK(id->qp == NULL, "rdma_destroy_qp of a destroyed QP");
	}
	CHECK(rdma_destroy_id(id) == 0, "destroy sync id");

	connections();
	anybinds();

	/* devices, getaddrinfo */
	int n = 0;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n >= 1 && devs[0] && !devs[n], "rdma_get_devices");
	rdma_free_devices(devs);
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE | RAI_NUMERICHOST, .ai_port_space = RDMA_PS_TCP }, *res;
	CHECK(rdma_getaddrinfo(argv[1], "7999", &hints, &res) == 0 && res->ai_src_addr &&
		      res->ai_qp_type == IBV_QPT_RC, "rdma_getaddrinfo");
	rdma_freeaddrinfo(res);
	FAILS(rdma_getaddrinfo(NULL, NULL, NULL, &res), EINVAL);
	/* neither node nor service: the hints' own, as librdmacm answers (pyverbs asks) */
	hints.ai_flags = 0;
	CHECK(rdma_getaddrinfo(NULL, NULL, &hints, &res) == 0 && !res->ai_src_addr && !res->ai_dst_addr &&
		      res->ai_port_space == RDMA_PS_TCP, "rdma_getaddrinfo of hints alone");
	rdma_freeaddrinfo(res);

	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("ok\n");
	fflush(stdout);
	_exit(0); /* the waiter on the destroyed channel stays blocked, as on the kernel */
}
