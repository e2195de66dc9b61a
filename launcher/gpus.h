/* Counting GPUs without touching CUDA: the agent must never create a CUDA context (it forks
 * workers), so the count comes from the driver's /proc entries, like nvidia-smi -L would. */
#ifndef MUSTER_LAUNCHER_GPUS_H
#define MUSTER_LAUNCHER_GPUS_H

#define LAUNCHER_NVIDIA_PROC_DIR_DEFAULT "/proc/driver/nvidia/gpus"
/* The driver's GPU directory: $MUSTER_NVIDIA_PROC_DIR when set (the tests' seam for a machine
 * "with GPUs" that has none), else the default. */
#define LAUNCHER_NVIDIA_PROC_DIR launcher_nvidia_proc_dir()
const char *launcher_nvidia_proc_dir(void);

/* Returns the number of GPUs a CUDA program started here would see: the entries of proc_dir
 * (one directory per GPU), filtered through cuda_visible (NULL = unset) the way the CUDA
 * runtime reads it: the list stops at the first invalid entry, "" or "-1" hides every GPU.
 * Returns 0 when the directory is missing. */
int launcher_count_gpus(const char *proc_dir, const char *cuda_visible);

#endif
