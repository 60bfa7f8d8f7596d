"""A Flower Grid that runs the ClientApp in the test's process (tests/federated): Flower's server and client logic
without a Ray cluster, which takes longer to start on CI's 2 cores than these tests take to run."""
from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid


class InProcessGrid(Grid):
    """Flower's Grid with the ClientApp called in this process: node 1000+i is the client of partition i.
    `fail(node, message)` may raise, standing for a client that crashes, or return True for one that never
    replies (the round's timeout passes)."""

    def __init__(self, app, n: int, fail=None):
        self.app, self.fail = app, fail
        self.nodes = {1000 + i: Context(run_id=1, node_id=1000 + i, state=RecordDict(), run_config={},
                                        node_config={"partition-id": i, "num-partitions": n}) for i in range(n)}

    def set_run(self, run):
        pass

    @property
    def run(self):
        return None

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id, message_type)

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for m in messages:
            node = m.metadata.dst_node_id
            m.metadata.__dict__["_message_id"] = f"m{node}"  # reply_to needs an id
            try:
                if self.fail and self.fail(node, m):
                    continue
                replies.append(self.app(m, self.nodes[node]))
            except Exception as e:
                replies.append(Message(Error(code=1, reason=str(e)), reply_to=m))
        return replies
