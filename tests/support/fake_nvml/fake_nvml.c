/*
 * A stand-in libnvidia-ml.so.1 for the test suite: the real nvidia-ml-py bindings load it and see the GPUs,
 * processes, utilisation samples, topology and failures written in a text file named by $FAKE_NVML_CONFIG.
 * The file is re-read whenever it changes (inode, size or mtime), so a test can add a live PID while a
 * collector keeps its handles. Format: see tests/support/fake_nvml.py, which writes it.
 *
 * Build: gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c
 * Define OMIT_<function> to leave a symbol out (NVML "function not found" in pynvml); OMIT_v3 / OMIT_v2 leave out
 * every process list of that version, as older drivers do.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_GPUS 64
#define MAX_PROCS 1024
#define MAX_SAMPLES 1024
#define MAX_MIGS 8
#define STR 96

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6,
       INSUFFICIENT_SIZE = 7, GPU_IS_LOST = 15, ARGUMENT_VERSION_MISMATCH = 25 };
/* NVML_GPU_INSTANCE_PROFILE_COUNT: profile indices a driver may be asked about. */
#define GI_PROFILE_COUNT 0x12
/* nvmlGpuInstanceProfileInfo_v2: the structure version the caller sets (size 0x98). */
#define GI_PROFILE_INFO_V2 0x02000098u
/* The fake's profile ids are their index plus this, so a caller mixing up index and id gets the wrong profile. */
#define GI_PROFILE_ID_OFFSET 20

/* Per-GPU error injection keys ("error <key> <code>"). */
enum { E_UUID, E_NAME, E_PCI, E_MEMORY, E_UTIL, E_POWER, E_TEMP, E_ENERGY, E_PROCS, E_PROC_UTIL, E_MIG, E_TOPO,
       E_MIG_PROFILE, E_COUNT };
static const char *ERROR_KEYS[E_COUNT] = {"uuid", "name", "pci", "memory", "utilization", "power", "temperature",
                                          "energy", "processes", "process_utilization", "mig", "topology",
                                          "mig_profile"};

typedef struct { unsigned pid; unsigned long long used; int kind; } proc_t;          /* kind 0 compute 1 graphics 2 mps */
typedef struct { unsigned pid; unsigned long long ts; unsigned sm, mem; } sample_t;

typedef struct device {
    int is_mig, index;
    struct device *parent;
    char uuid[STR], name[STR], pci[STR];
    unsigned long long mem_total, mem_used;
    unsigned util_gpu, util_mem, power_mw, temperature;
    unsigned long long energy_mj;
    int lost;
    int errors[E_COUNT];
    unsigned gi, ci;
    char profile[STR]; /* a MIG device's GPU instance profile ("1g.10gb"); empty: none configured */
    unsigned cslices;  /* a MIG device's compute slices when its compute instance is smaller than its GPU instance */
    int nprocs, nsamples;
    int mig_mode, nmigs;
    int compute_mode; /* nvmlComputeMode_t; -1: not configured, answered NOT_SUPPORTED */
} device_t;

typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } pci_t;
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } mem2_t;
typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } pinfo_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; } pinfo_v1_t;
typedef struct { unsigned pid; unsigned long long timeStamp; unsigned smUtil, memUtil, encUtil, decUtil; } psample_t;
typedef struct {
    unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} gi_profile_v2_t;
typedef struct { device_t *device; unsigned id, profileId, start, size; } gi_info_t;

static device_t gpus[MAX_GPUS];
static proc_t procs[MAX_GPUS][MAX_PROCS];
static sample_t samples[MAX_GPUS][MAX_SAMPLES];
static device_t migs[MAX_GPUS][MAX_MIGS];
static int ngpus;
static int nvlink[MAX_GPUS][MAX_GPUS];
static int topo[MAX_GPUS][MAX_GPUS];
static char driver[STR] = "550.54.15";
static int init_error;
static int initialized;
static struct stat loaded_stat;
static char loaded_path[4096];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void copy_str(char *dst, const char *src) {
    strncpy(dst, src, STR - 1);
    dst[STR - 1] = 0;
    size_t n = strlen(dst);
    while (n && (dst[n - 1] == '\n' || dst[n - 1] == '\r')) dst[--n] = 0;
}

static void reset(void) {
    memset(gpus, 0, sizeof gpus);
    memset(migs, 0, sizeof migs);
    memset(nvlink, 0, sizeof nvlink);
    for (int a = 0; a < MAX_GPUS; a++)
        for (int b = 0; b < MAX_GPUS; b++) topo[a][b] = -1;
    ngpus = 0;
    init_error = 0;
    strcpy(driver, "550.54.15");
}

static void parse(FILE *f) {
    char line[512], word[64], rest[STR];
    device_t *cur = NULL;
    reset();
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b, c, d, e, g;
        if (sscanf(line, "%63s", word) != 1 || word[0] == '#') continue;
        const char *value = line + strlen(word);
        while (*value == ' ') value++;
        copy_str(rest, value);
        if (!strcmp(word, "driver")) copy_str(driver, rest);
        else if (!strcmp(word, "init_error")) init_error = atoi(rest);
        else if (!strcmp(word, "gpu") && ngpus < MAX_GPUS) {
            cur = &gpus[ngpus];
            cur->index = ngpus++;
            cur->compute_mode = -1;
        } else if (!cur) continue;
        else if (!strcmp(word, "uuid")) copy_str(cur->uuid, rest);
        else if (!strcmp(word, "name")) copy_str(cur->name, rest);
        else if (!strcmp(word, "pci")) copy_str(cur->pci, rest);
        else if (!strcmp(word, "memory") && sscanf(rest, "%llu %llu", &a, &b) == 2) { cur->mem_total = a; cur->mem_used = b; }
        else if (!strcmp(word, "utilization") && sscanf(rest, "%llu %llu", &a, &b) == 2) { cur->util_gpu = a; cur->util_mem = b; }
        else if (!strcmp(word, "power_mw")) cur->power_mw = strtoul(rest, NULL, 10);
        else if (!strcmp(word, "temperature")) cur->temperature = strtoul(rest, NULL, 10);
        else if (!strcmp(word, "energy_mj")) cur->energy_mj = strtoull(rest, NULL, 10);
        else if (!strcmp(word, "lost")) cur->lost = atoi(rest);
        else if (!strcmp(word, "error")) {
            char key[64]; int code;
            if (sscanf(rest, "%63s %d", key, &code) == 2)
                for (int k = 0; k < E_COUNT; k++)
                    if (!strcmp(key, ERROR_KEYS[k])) cur->errors[k] = code;
        } else if (!strcmp(word, "process") && cur->nprocs < MAX_PROCS && sscanf(rest, "%llu %llu %llu", &a, &b, &c) == 3) {
            proc_t *p = &procs[cur->index][cur->nprocs++];
            p->pid = a; p->used = b; p->kind = (int)c;
        } else if (!strcmp(word, "sample") && cur->nsamples < MAX_SAMPLES &&
                   sscanf(rest, "%llu %llu %llu %llu", &a, &b, &c, &d) == 4) {
            sample_t *s = &samples[cur->index][cur->nsamples++];
            s->pid = a; s->ts = b; s->sm = c; s->mem = d;
        } else if (!strcmp(word, "mig_mode")) cur->mig_mode = atoi(rest);
        else if (!strcmp(word, "compute_mode")) cur->compute_mode = atoi(rest);
        else if (!strcmp(word, "mig") && cur->nmigs < MAX_MIGS) {
            char uuid[STR], profile[STR] = "";
            b = 0;
            if (sscanf(rest, "%95s %llu %llu %llu %llu %95s %llu", uuid, &d, &e, &g, &a, profile, &b) >= 5) {
                device_t *m = &migs[cur->index][cur->nmigs];
                m->is_mig = 1; m->index = cur->nmigs++; m->parent = cur;
                copy_str(m->uuid, uuid);
                copy_str(m->profile, profile);
                m->gi = d; m->ci = e; m->mem_total = g; m->mem_used = a; m->cslices = (unsigned)b;
            }
        } else if (!strcmp(word, "nvlink") && sscanf(rest, "%llu", &a) == 1 && a < MAX_GPUS) {
            nvlink[cur->index][a] = nvlink[a][cur->index] = 1;
        } else if (!strcmp(word, "topology") && sscanf(rest, "%llu %llu", &a, &b) == 2 && a < MAX_GPUS) {
            topo[cur->index][a] = topo[a][cur->index] = (int)b;
        }
    }
}

/* Re-read the config when $FAKE_NVML_CONFIG names another file or the file changed. */
static void refresh(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    struct stat st;
    pthread_mutex_lock(&lock);
    if (!path || stat(path, &st) != 0) {
        if (loaded_path[0]) { reset(); loaded_path[0] = 0; }
        pthread_mutex_unlock(&lock);
        return;
    }
    if (strcmp(path, loaded_path) || st.st_ino != loaded_stat.st_ino || st.st_size != loaded_stat.st_size ||
        st.st_mtim.tv_sec != loaded_stat.st_mtim.tv_sec || st.st_mtim.tv_nsec != loaded_stat.st_mtim.tv_nsec) {
        FILE *f = fopen(path, "r");
        if (f) {
            parse(f);
            fclose(f);
            loaded_stat = st;
            strncpy(loaded_path, path, sizeof loaded_path - 1);
        }
    }
    pthread_mutex_unlock(&lock);
}

/* Common checks of every device query: initialised, valid handle, lost GPU, injected error. */
static int check(device_t *dev, int key) {
    refresh();
    if (!initialized) return UNINITIALIZED;
    if (!dev) return INVALID_ARGUMENT;
    device_t *physical = dev->is_mig ? dev->parent : dev;
    if (physical->lost) return GPU_IS_LOST;
    if (key >= 0 && physical->errors[key]) return physical->errors[key];
    return OK;
}

static int put_str(const char *value, char *buf, unsigned len) {
    if (!buf || strlen(value) + 1 > len) return INSUFFICIENT_SIZE;
    strcpy(buf, value);
    return OK;
}

static int init(void) {
    refresh();
    if (init_error) return init_error;
    initialized++;
    return OK;
}
#ifndef OMIT_nvmlInitWithFlags
int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    return init();
}
#endif
int nvmlInit_v2(void) { return init(); }
int nvmlInit(void) { return init(); }
int nvmlShutdown(void) {
    if (!initialized) return UNINITIALIZED;
    initialized--;
    return OK;
}
const char *nvmlErrorString(int result) {
    switch (result) {
        case OK: return "Success";
        case NOT_SUPPORTED: return "Not Supported";
        case GPU_IS_LOST: return "GPU is lost";
        default: return "Fake NVML error";
    }
}
int nvmlSystemGetDriverVersion(char *buf, unsigned len) {
    refresh();
    return initialized ? put_str(driver, buf, len) : UNINITIALIZED;
}
int nvmlSystemGetNVMLVersion(char *buf, unsigned len) {
    refresh();
    return initialized ? put_str("12.550.54.15", buf, len) : UNINITIALIZED;
}
static int device_count(unsigned *count) {
    refresh();
    if (!initialized) return UNINITIALIZED;
    *count = (unsigned)ngpus;
    return OK;
}
#ifndef OMIT_nvmlDeviceGetCount_v2
int nvmlDeviceGetCount_v2(unsigned *count) { return device_count(count); }
#endif
int nvmlDeviceGetCount(unsigned *count) { return device_count(count); }
/* A GPU that fell off the bus (Xid 79) has no handle at all: NVML answers GPU_IS_LOST for it. */
static int handle_by_index(unsigned index, device_t **dev) {
    refresh();
    if (!initialized) return UNINITIALIZED;
    if (index >= (unsigned)ngpus) return INVALID_ARGUMENT;
    if (gpus[index].lost) return GPU_IS_LOST;
    *dev = &gpus[index];
    return OK;
}
#ifndef OMIT_nvmlDeviceGetHandleByIndex_v2
int nvmlDeviceGetHandleByIndex_v2(unsigned index, device_t **dev) { return handle_by_index(index, dev); }
#endif
int nvmlDeviceGetHandleByIndex(unsigned index, device_t **dev) { return handle_by_index(index, dev); }
int nvmlDeviceGetIndex(device_t *dev, unsigned *index) {
    int r = check(dev, -1);
    if (r) return r;
    *index = (unsigned)dev->index;
    return OK;
}
int nvmlDeviceGetUUID(device_t *dev, char *buf, unsigned len) {
    int r = check(dev, E_UUID);
    return r ? r : put_str(dev->uuid, buf, len);
}
/* A MIG device is named after its parent and its profile, as drivers name them: "NVIDIA A100 ... MIG 1g.10gb", and
 * "... MIG 1c.3g.40gb" for a compute instance of one compute slice in a 3g.40gb GPU instance. */
int nvmlDeviceGetName(device_t *dev, char *buf, unsigned len) {
    int r = check(dev, E_NAME);
    if (r) return r;
    if (dev->is_mig && dev->profile[0]) {
        char name[2 * STR + 24], compute[16] = "";
        if (dev->cslices) snprintf(compute, sizeof compute, "%uc.", dev->cslices);
        snprintf(name, sizeof name, "%s MIG %s%s", dev->parent->name, compute, dev->profile);
        return put_str(name, buf, len);
    }
    return put_str(dev->is_mig ? dev->parent->name : dev->name, buf, len);
}
/* The legacy bus id has a 4-digit domain ("0000:17:00.0"); the configured one may have NVML's 8-digit form. */
static const char *legacy_bus_id(const char *pci) { return strlen(pci) == 16 ? pci + 4 : pci; }
static int pci_info(device_t *dev, pci_t *pci) {
    int r = check(dev, E_PCI);
    if (r) return r;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%.31s", dev->pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%.15s", legacy_bus_id(dev->pci));
    return OK;
}
#ifndef OMIT_nvmlDeviceGetPciInfo_v3
int nvmlDeviceGetPciInfo_v3(device_t *dev, pci_t *pci) { return pci_info(dev, pci); }
#endif
#ifndef OMIT_nvmlDeviceGetPciInfo_v2
int nvmlDeviceGetPciInfo_v2(device_t *dev, pci_t *pci) { return pci_info(dev, pci); }
#endif
/* v1 layout: the 16-byte bus id comes first (where v2 has busIdLegacy), then the same ids, then reserved words. */
int nvmlDeviceGetPciInfo(device_t *dev, pci_t *pci) {
    int r = check(dev, E_PCI);
    if (r) return r;
    memset(pci, 0, 52);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%.15s", legacy_bus_id(dev->pci));
    return OK;
}
int nvmlDeviceGetMemoryInfo(device_t *dev, mem_t *mem) {
    int r = check(dev, E_MEMORY);
    if (r) return r;
    mem->total = dev->mem_total;
    mem->used = dev->mem_used;
    mem->free = dev->mem_total > dev->mem_used ? dev->mem_total - dev->mem_used : 0;
    return OK;
}
#ifndef OMIT_nvmlDeviceGetMemoryInfo_v2
int nvmlDeviceGetMemoryInfo_v2(device_t *dev, mem2_t *mem) {
    int r = check(dev, E_MEMORY);
    if (r) return r;
    mem->total = dev->mem_total;
    mem->reserved = 0;
    mem->used = dev->mem_used;
    mem->free = dev->mem_total > dev->mem_used ? dev->mem_total - dev->mem_used : 0;
    return OK;
}
#endif
int nvmlDeviceGetUtilizationRates(device_t *dev, util_t *util) {
    int r = check(dev, E_UTIL);
    if (r) return r;
    if (dev->is_mig) return NOT_SUPPORTED;
    util->gpu = dev->util_gpu;
    util->memory = dev->util_mem;
    return OK;
}
int nvmlDeviceGetPowerUsage(device_t *dev, unsigned *mw) {
    int r = check(dev, E_POWER);
    if (r) return r;
    *mw = dev->power_mw;
    return OK;
}
int nvmlDeviceGetTemperature(device_t *dev, int sensor, unsigned *celsius) {
    int r = check(dev, E_TEMP);
    if (r) return r;
    if (sensor != 0) return INVALID_ARGUMENT;
    *celsius = dev->temperature;
    return OK;
}
#ifndef OMIT_nvmlDeviceGetTotalEnergyConsumption
int nvmlDeviceGetTotalEnergyConsumption(device_t *dev, unsigned long long *mj) {
    int r = check(dev, E_ENERGY);
    if (r) return r;
    *mj = dev->energy_mj;
    return OK;
}
#endif

/* Fills v2/v3 entries (pinfo_t) or, with v1 set, the 16-byte nvmlProcessInfo_v1_t of the unversioned lists. */
static int list_procs(device_t *dev, int kind, unsigned *count, void *out, int v1) {
    int r = check(dev, E_PROCS);
    if (r) return r;
    if (dev->is_mig) return NOT_SUPPORTED;
    const proc_t *all = procs[dev->index];
    unsigned n = 0;
    for (int i = 0; i < dev->nprocs; i++) n += all[i].kind == kind;
    if (*count < n) {
        *count = n;
        return INSUFFICIENT_SIZE;
    }
    unsigned j = 0;
    for (int i = 0; i < dev->nprocs; i++) {
        if (all[i].kind != kind) continue;
        if (v1) {
            pinfo_v1_t *info = (pinfo_v1_t *)out + j;
            info->pid = all[i].pid;
            info->usedGpuMemory = all[i].used;
        } else {
            pinfo_t *info = (pinfo_t *)out + j;
            info->pid = all[i].pid;
            info->usedGpuMemory = all[i].used;
            info->gpuInstanceId = 0xFFFFFFFF;
            info->computeInstanceId = 0xFFFFFFFF;
        }
        j++;
    }
    *count = n;
    return OK;
}
/* Process lists in every version a driver may have: _v3 (R510+), _v2 (R470), unversioned v1 (older). */
#define PROCESS_LIST(name, kind, v1) \
    int name(device_t *d, unsigned *c, void *i) { return list_procs(d, kind, c, i, v1); }
#ifndef OMIT_v3
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, 0, 0)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, 1, 0)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, 2, 0)
#endif
#ifndef OMIT_v2
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, 0, 0)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, 1, 0)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, 2, 0)
#endif
#ifndef OMIT_nvmlDeviceGetComputeRunningProcesses
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, 0, 1)
#endif
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, 1, 1)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, 2, 1)

#ifndef OMIT_nvmlDeviceGetProcessUtilization
int nvmlDeviceGetProcessUtilization(device_t *dev, psample_t *out, unsigned *count, unsigned long long last_seen) {
    int r = check(dev, E_PROC_UTIL);
    if (r) return r;
    if (dev->is_mig) return NOT_SUPPORTED;
    const sample_t *all = samples[dev->index];
    unsigned n = 0;
    for (int i = 0; i < dev->nsamples; i++) n += all[i].ts > last_seen;
    if (n == 0) return NOT_FOUND;
    if (!out || *count < n) {
        *count = n;
        return INSUFFICIENT_SIZE;
    }
    unsigned j = 0;
    for (int i = 0; i < dev->nsamples; i++) {
        const sample_t *s = &all[i];
        if (s->ts <= last_seen) continue;
        out[j].pid = s->pid;
        out[j].timeStamp = s->ts;
        out[j].smUtil = s->sm;
        out[j].memUtil = s->mem;
        out[j].encUtil = out[j].decUtil = 0;
        j++;
    }
    *count = n;
    return OK;
}
#endif

int nvmlDeviceGetP2PStatus(device_t *a, device_t *b, int index, int *status) {
    int r = check(a, E_TOPO);
    if (!r) r = check(b, E_TOPO);
    if (r) return r;
    /* 2 = NVML_P2P_CAPS_INDEX_NVLINK; 0 = NVML_P2P_STATUS_OK, 5 = NVML_P2P_STATUS_NOT_SUPPORTED */
    *status = (index == 2 && nvlink[a->index][b->index]) ? 0 : 5;
    return OK;
}
int nvmlDeviceGetTopologyCommonAncestor(device_t *a, device_t *b, int *level) {
    int r = check(a, E_TOPO);
    if (!r) r = check(b, E_TOPO);
    if (r) return r;
    *level = topo[a->index][b->index] >= 0 ? topo[a->index][b->index] : 50;
    return OK;
}
int nvmlDeviceGetComputeMode(device_t *dev, int *mode) {
    int r = check(dev, -1);
    if (r) return r;
    if (dev->compute_mode < 0) return NOT_SUPPORTED;
    *mode = dev->compute_mode;
    return OK;
}
int nvmlDeviceGetMigMode(device_t *dev, unsigned *current, unsigned *pending) {
    int r = check(dev, E_MIG);
    if (r) return r;
    *current = *pending = (unsigned)dev->mig_mode;
    return OK;
}
int nvmlDeviceGetMaxMigDeviceCount(device_t *dev, unsigned *count) {
    int r = check(dev, E_MIG);
    if (r) return r;
    *count = dev->mig_mode ? MAX_MIGS : 0;
    return OK;
}
int nvmlDeviceGetMigDeviceHandleByIndex(device_t *dev, unsigned index, device_t **mig) {
    int r = check(dev, E_MIG);
    if (r) return r;
    if (!dev->mig_mode || index >= MAX_MIGS) return INVALID_ARGUMENT;
    if ((int)index >= dev->nmigs) return NOT_FOUND;
    *mig = &migs[dev->index][index];
    return OK;
}
int nvmlDeviceGetGpuInstanceId(device_t *dev, unsigned *id) {
    int r = check(dev, E_MIG);
    if (r) return r;
    if (!dev->is_mig) return INVALID_ARGUMENT;
    *id = dev->gi;
    return OK;
}
int nvmlDeviceGetComputeInstanceId(device_t *dev, unsigned *id) {
    int r = check(dev, E_MIG);
    if (r) return r;
    if (!dev->is_mig) return INVALID_ARGUMENT;
    *id = dev->ci;
    return OK;
}

/* The GPU instance profiles of a GPU: the distinct profiles of its configured MIG devices, in order of first use;
 * profile index i has id i + GI_PROFILE_ID_OFFSET. Returns the index of `profile`, or the count when absent. */
static int profile_table(device_t *gpu, const char *table[GI_PROFILE_COUNT], const char *profile) {
    int n = 0, found = -1;
    for (int i = 0; i < gpu->nmigs; i++) {
        const char *p = migs[gpu->index][i].profile;
        if (!p[0]) continue;
        int seen = 0;
        for (int j = 0; j < n; j++) seen |= !strcmp(table[j], p);
        if (!seen && n < GI_PROFILE_COUNT) table[n++] = p;
    }
    for (int j = 0; profile && j < n; j++)
        if (!strcmp(table[j], profile)) found = j;
    return found >= 0 ? found : n;
}
#ifndef OMIT_nvmlDeviceGetGpuInstanceProfileInfoV
int nvmlDeviceGetGpuInstanceProfileInfoV(device_t *dev, unsigned profile, gi_profile_v2_t *info) {
    int r = check(dev, E_MIG_PROFILE);
    if (r) return r;
    if (dev->is_mig || !info || profile >= GI_PROFILE_COUNT) return INVALID_ARGUMENT;
    if (info->version != GI_PROFILE_INFO_V2) return ARGUMENT_VERSION_MISMATCH;
    const char *table[GI_PROFILE_COUNT];
    int n = profile_table(dev, table, NULL);
    if (!dev->mig_mode || (int)profile >= n) return NOT_SUPPORTED;
    unsigned slices = 0, memory_gb = 0;
    sscanf(table[profile], "%ug.%ugb", &slices, &memory_gb);
    memset((char *)info + sizeof info->version, 0, sizeof *info - sizeof info->version);
    info->id = profile + GI_PROFILE_ID_OFFSET;
    info->sliceCount = slices;
    info->instanceCount = slices ? 7 / slices : 0;
    info->memorySizeMB = (unsigned long long)memory_gb * 1024;
    snprintf(info->name, sizeof info->name, "MIG %s", table[profile]);
    return OK;
}
#endif
/* A GPU instance handle is the first MIG device of that instance (opaque to callers). */
int nvmlDeviceGetGpuInstanceById(device_t *dev, unsigned id, device_t **gi) {
    int r = check(dev, E_MIG_PROFILE);
    if (r) return r;
    if (dev->is_mig || !gi) return INVALID_ARGUMENT;
    if (!dev->mig_mode) return NOT_SUPPORTED;
    for (int i = 0; i < dev->nmigs; i++)
        if (migs[dev->index][i].gi == id) {
            *gi = &migs[dev->index][i];
            return OK;
        }
    return NOT_FOUND;
}
int nvmlGpuInstanceGetInfo(device_t *gi, gi_info_t *info) {
    int r = check(gi, E_MIG_PROFILE);
    if (r) return r;
    if (!gi->is_mig || !info) return INVALID_ARGUMENT;
    const char *table[GI_PROFILE_COUNT];
    int index = profile_table(gi->parent, table, gi->profile);
    memset(info, 0, sizeof *info);
    info->device = gi->parent;
    info->id = gi->gi;
    /* a GPU instance without a configured profile gets an id no profile index has */
    info->profileId = (unsigned)index + GI_PROFILE_ID_OFFSET + (gi->profile[0] ? 0 : GI_PROFILE_COUNT);
    return OK;
}
