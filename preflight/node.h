/* The pre-flight's node process (`muster __preflight-node`, started by the agent). */
#ifndef MUSTER_PREFLIGHT_NODE_H
#define MUSTER_PREFLIGHT_NODE_H

int preflight_node_main(int argc, char **argv);

#endif
