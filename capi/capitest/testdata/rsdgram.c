/*
 * rsdgram: the datagram rsocket calls udpong does not make, against librdmacm.so.1,
 * two sockets of one process on one device address (each its own UD QP):
 *
 *   rsdgram ADDR    prints "dgram ok" and exits 0, or says what failed and exits 1
 *
 * Checked: rgetsockname; a non-blocking rrecv with nothing there (EAGAIN); rsendto then
 * rselect, rrecvfrom with MSG_PEEK and without (the sender's address and port); the
 * answer by rpoll and rrecv; rconnect, rsend and rgetpeername; a datagram one byte too
 * long (EMSGSIZE) and the longest; SO_RCVBUF remembered, SO_TYPE; rlisten (EOPNOTSUPP);
 * 100 datagrams in a row, each arriving whole; rclose.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <rdma/rsocket.h>

#define MAXDG 2032 /* IPv4: 2048 with the 16-byte UDP header of rsockets' protocol */

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "rsdgram: %s (errno %d: %s)\n", what, errno, strerror(errno));
		exit(1);
	}
}

static int bound(const char *addr, struct sockaddr_in *sin)
{
	socklen_t l = sizeof(*sin);
	int fd = rsocket(AF_INET, SOCK_DGRAM, 0);

	check(fd >= 0, "rsocket");
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	check(inet_pton(AF_INET, addr, &sin->sin_addr) == 1, "address");
	check(rbind(fd, (struct sockaddr *)sin, sizeof(*sin)) == 0, "rbind");
	check(rgetsockname(fd, (struct sockaddr *)sin, &l) == 0 && sin->sin_port != 0, "rgetsockname");
	return fd;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa, sb, from, peer;
	socklen_t fl = sizeof(from);
	static char buf[4096], big[MAXDG + 1];
	int a, b, v;
	ssize_t n;

	if (argc != 2) {
		fprintf(stderr, "usage: rsdgram ADDR\n");
		return 2;
	}
	a = bound(argv[1], &sa);
	b = bound(argv[1], &sb);

	check(rfcntl(b, F_SETFL, O_NONBLOCK) == 0, "rfcntl O_NONBLOCK");
	n = rrecv(b, buf, sizeof(buf), 0);
	check(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "a non-blocking rrecv with nothing there: not EAGAIN");
	check(rfcntl(b, F_SETFL, 0) == 0, "rfcntl blocking");

	/* the first datagram goes over UDP, asking for b's QPN */
	check(rsendto(a, "hello", 5, 0, (struct sockaddr *)&sb, sizeof(sb)) == 5, "rsendto");
	fd_set r;
	struct timeval tv = {.tv_sec = 10};
	FD_ZERO(&r);
	FD_SET(b, &r);
	check(rselect(b + 1, &r, NULL, NULL, &tv) == 1 && FD_ISSET(b, &r), "rselect: b not readable");
	n = rrecvfrom(b, buf, sizeof(buf), MSG_PEEK, (struct sockaddr *)&from, &fl);
	check(n == 5 && !memcmp(buf, "hello", 5), "rrecvfrom MSG_PEEK");
	memset(&from, 0, sizeof(from));
	fl = sizeof(from);
	n = rrecvfrom(b, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
	check(n == 5 && !memcmp(buf, "hello", 5), "rrecvfrom");
	check(fl == sizeof(from) && from.sin_port == sa.sin_port && from.sin_addr.s_addr == sa.sin_addr.s_addr,
	      "rrecvfrom: not a's address and port");

	/* the answer by UD: b learnt a's QPN from its header */
	check(rsendto(b, "back", 4, 0, (struct sockaddr *)&from, fl) == 4, "rsendto back");
	struct pollfd p = {.fd = a, .events = POLLIN};
	check(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "rpoll: a not readable");
	n = rrecv(a, buf, sizeof(buf), 0);
	check(n == 4 && !memcmp(buf, "back", 4), "rrecv back");

	/* connected */
	check(rconnect(a, (struct sockaddr *)&sb, sizeof(sb)) == 0, "rconnect");
	fl = sizeof(peer);
	check(rgetpeername(a, (struct sockaddr *)&peer, &fl) == 0 && peer.sin_port == sb.sin_port, "rgetpeername");
	check(rsend(a, "connected", 9, 0) == 9, "rsend");
	n = rrecv(b, buf, sizeof(buf), 0);
	check(n == 9 && !memcmp(buf, "connected", 9), "rrecv connected");

	memset(big, 'x', sizeof(big));
	check(rsend(a, big, MAXDG + 1, 0) < 0 && errno == EMSGSIZE, "a datagram too long: not EMSGSIZE");
	check(rsend(a, big, MAXDG, 0) == MAXDG, "the longest datagram");
	n = rrecv(b, buf, sizeof(buf), 0);
	check(n == MAXDG && buf[0] == 'x' && buf[MAXDG - 1] == 'x', "the longest datagram received");

	v = 1 << 19;
	check(rsetsockopt(b, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) == 0, "rsetsockopt SO_RCVBUF");
	fl = sizeof(v);
	check(rgetsockopt(b, SOL_SOCKET, SO_RCVBUF, &v, &fl) == 0 && v == 1 << 19, "rgetsockopt SO_RCVBUF");
	fl = sizeof(v);
	check(rgetsockopt(b, SOL_SOCKET, SO_TYPE, &v, &fl) == 0 && v == SOCK_DGRAM, "rgetsockopt SO_TYPE");
	check(rlisten(b, 1) < 0 && errno == EOPNOTSUPP, "rlisten: not EOPNOTSUPP");

	/* a run of datagrams, each whole (some may be lost, as UDP's; on loopback none are) */
	for (int i = 0; i < 100; i++) {
		memset(big, 'a' + i % 26, 100 + i);
		check(rsend(a, big, 100 + i, 0) == 100 + i, "rsend in a run");
	}
	for (int i = 0; i < 100; i++) {
		p = (struct pollfd){.fd = b, .events = POLLIN};
		check(rpoll(&p, 1, 10000) == 1, "a datagram of the run never came");
		n = rrecv(b, buf, sizeof(buf), 0);
		check(n >= 100 && n < 200 && buf[0] == 'a' + (n - 100) % 26 && buf[n - 1] == buf[0],
		      "a datagram of the run is not whole");
	}

	check(rclose(a) == 0 && rclose(b) == 0, "rclose");
	printf("dgram ok\n");
	return 0;
}
