//go:build verbs && linux && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

// The helpers below build work requests in C, on the C stack: a chain of
// requests links them with pointers, which Go memory handed to C may not
// hold. Go passes arrays of plain numbers (and C pointers) only.

// weft_rx is one receive completion, as Poll needs it.
typedef struct {
	uint32_t slot;
	uint32_t len;
	int32_t  status;
	uint32_t pad;
} weft_rx;

// weft_tx is one frame to post: which send slot, how long, to whom (ah,
// qpn and qkey on the UD queue pair; NULL, 0 and 0 on a connected one).
typedef struct {
	struct ibv_ah *ah;
	uint64_t wr_id;
	uint32_t slot;
	uint32_t len;
	uint32_t qpn;
	uint32_t qkey;
	uint32_t signaled;
	uint32_t pad;
} weft_tx;

enum { WEFT_BATCH = 32 };

int weft_poll_rx(struct ibv_cq *cq, weft_rx *out, int n) {
	struct ibv_wc wc[WEFT_BATCH];
	if (n > WEFT_BATCH) n = WEFT_BATCH;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].slot = (uint32_t)wc[i].wr_id;
		out[i].len = wc[i].byte_len;
		out[i].status = wc[i].status;
	}
	return got;
}

// weft_poll_tx reaps send completions: it returns how many it took (or a
// negative value), *last the largest wr_id among them, *bad the first
// failed status (0 if none).
int weft_poll_tx(struct ibv_cq *cq, uint64_t *last, int *bad) {
	struct ibv_wc wc[WEFT_BATCH];
	int total = 0;
	*bad = 0;
	for (;;) {
		int got = ibv_poll_cq(cq, WEFT_BATCH, wc);
		if (got < 0) return got;
		for (int i = 0; i < got; i++) {
			if (wc[i].status != IBV_WC_SUCCESS && *bad == 0) *bad = wc[i].status;
			if (wc[i].wr_id > *last) *last = wc[i].wr_id;
		}
		total += got;
		if (got < WEFT_BATCH) return total;
	}
}

// weft_recv_chain links n receive work requests, slot slots[i]'s buffer
// (slot_len bytes at base) in each, for one post (n <= WEFT_BATCH).
void weft_recv_chain(struct ibv_recv_wr *wr, struct ibv_sge *sge, uint64_t base, uint32_t lkey,
                     uint32_t slot_len, const uint32_t *slots, int n) {
	for (int i = 0; i < n; i++) {
		sge[i].addr = base + (uint64_t)slots[i] * slot_len;
		sge[i].length = slot_len;
		sge[i].lkey = lkey;
		wr[i].wr_id = slots[i];
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
}

int weft_post_recv(struct ibv_qp *qp, uint64_t base, uint32_t lkey, uint32_t slot_len,
                          const uint32_t *slots, int n) {
	struct ibv_recv_wr wr[WEFT_BATCH], *bad;
	struct ibv_sge sge[WEFT_BATCH];
	if (n > WEFT_BATCH) n = WEFT_BATCH;
	weft_recv_chain(wr, sge, base, lkey, slot_len, slots, n);
	return ibv_post_recv(qp, wr, &bad);
}

// weft_post_send posts n frames, those up to inline_len bytes (if not 0)
// inline; on failure *posted says how many went.
int weft_post_send(struct ibv_qp *qp, uint64_t base, uint32_t lkey, uint32_t slot_len,
                          const weft_tx *tx, int n, uint32_t inline_len, int *posted) {
	struct ibv_send_wr wr[WEFT_BATCH], *bad = NULL;
	struct ibv_sge sge[WEFT_BATCH];
	if (n > WEFT_BATCH) n = WEFT_BATCH;
	for (int i = 0; i < n; i++) {
		sge[i].addr = base + (uint64_t)tx[i].slot * slot_len;
		sge[i].length = tx[i].len;
		sge[i].lkey = lkey;
		wr[i] = (struct ibv_send_wr){0};
		wr[i].wr_id = tx[i].wr_id;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_SEND;
		wr[i].send_flags = tx[i].signaled ? IBV_SEND_SIGNALED : 0;
		if (inline_len && tx[i].len <= inline_len) wr[i].send_flags |= IBV_SEND_INLINE;
		if (tx[i].ah) {
			wr[i].wr.ud.ah = tx[i].ah;
			wr[i].wr.ud.remote_qpn = tx[i].qpn;
			wr[i].wr.ud.remote_qkey = tx[i].qkey;
		}
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	int rc = ibv_post_send(qp, wr, &bad);
	*posted = rc == 0 ? n : (int)(bad - wr);
	return rc;
}

// weft_get_event takes one event from the (non-blocking) channel and
// acknowledges it: 1 if there was one, 0 if not, -errno on error.
int weft_get_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *cqctx;
	if (ibv_get_cq_event(ch, &cq, &cqctx) != 0)
		return errno == EAGAIN ? 0 : -errno;
	ibv_ack_cq_events(cq, 1);
	return 1;
}

int weft_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

int weft_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	return ibv_query_port(ctx, port, attr);
}

int weft_query_gid(struct ibv_context *ctx, uint8_t port, uint32_t index, struct ibv_gid_entry *e) {
	return ibv_query_gid_ex(ctx, port, index, e, 0) == 0 ? 0 : -errno;
}

int weft_qp_init(struct ibv_qp *qp, uint8_t port, uint32_t qkey) {
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qkey = qkey;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
}

int weft_qp_rtr_rts(struct ibv_qp *qp) {
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_RTR;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	if (rc) return rc;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

struct ibv_qp *weft_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
                                     uint32_t send_wr, uint32_t recv_wr) {
	struct ibv_qp_init_attr a = {0};
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = send_wr;
	a.cap.max_recv_wr = recv_wr;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.qp_type = IBV_QPT_UD;
	a.sq_sig_all = 0;
	return ibv_create_qp(pd, &a);
}

struct ibv_ah *weft_create_ah(struct ibv_pd *pd, uint8_t port, uint8_t sgid_index,
                                     const uint8_t *dgid, uint16_t dlid) {
	struct ibv_ah_attr a = {0};
	a.is_global = 1;
	memcpy(a.grh.dgid.raw, dgid, 16);
	a.grh.sgid_index = sgid_index;
	a.grh.hop_limit = 64;
	a.dlid = dlid;
	a.port_num = port;
	return ibv_create_ah(pd, &a);
}

struct ibv_device *weft_dev_at(struct ibv_device **list, int i) { return list[i]; }

// weft_reg_mr registers memory for local access, and for the peers'
// RDMA Write and Read when write and read are set.
struct ibv_mr *weft_reg_mr(struct ibv_pd *pd, uint64_t addr, size_t len, int write, int read) {
	int acc = IBV_ACCESS_LOCAL_WRITE;
	if (write) acc |= IBV_ACCESS_REMOTE_WRITE;
	if (read) acc |= IBV_ACCESS_REMOTE_READ;
	return ibv_reg_mr(pd, (void *)(uintptr_t)addr, len, acc);
}
*/
import "C"
