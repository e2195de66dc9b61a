/* Which PyTorch the workers' interpreter imports, found on disk without starting Python (a
 * Python start costs ~30 ms, an `import torch` seconds; launches take milliseconds).
 *
 * The worker environment depends on it where PyTorch renamed a variable: 1.13 reads only
 * NCCL_ASYNC_ERROR_HANDLING, 2.2+ reads TORCH_NCCL_ASYNC_ERROR_HANDLING and warns about the old
 * name in every process (the warning twice per worker). torchrun sets what its own
 * PyTorch reads; muster looks for torch/version.py where the interpreter's installation keeps
 * its packages: a virtual environment's or prefix's lib/python3.X/site-packages, Debian's
 * /usr/lib/python3/dist-packages and /usr/local/lib/python3.X/dist-packages, the user's
 * ~/.local/lib/python3.X/site-packages. PYTHONPATH and .pth tricks are not followed: then the
 * version is unknown and both names are set, as before. */
#ifndef MUSTER_LAUNCHER_TORCHVER_H
#define MUSTER_LAUNCHER_TORCHVER_H

#include <stddef.h>

/* Parses `__version__ = '2.11.0+cu130'` out of a torch/version.py text (len bytes). Returns 0
 * with *major, *minor set, or -EINVAL. */
int launcher_torchver_parse(const char *text, size_t len, int *major, int *minor);

/* The version of the torch package python (an absolute path, as launcher config resolved it)
 * would import, as 100 * major + minor (1.13 -> 113, 2.11 -> 211); 0 when not found. home:
 * $HOME for ~/.local (may be NULL). */
int launcher_torchver_find(const char *python, const char *home);

#endif
