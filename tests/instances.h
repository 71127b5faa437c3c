// The tests' backend instances: one fp32 instance per device, shared by a test program, opened on
// first use and never closed. The program itself opens its instances in run/device.c.
#ifndef INSTANCES_H
#define INSTANCES_H

#include "../base/util.h"
#include "../model/backend.h"

// The fp32 instance of `device` ("cpu", "cuda"); dies saying why it cannot run here
static inline const Backend* backend_named(const char* device) {
    static Backend* shared[BACKEND_DEVICE_COUNT];
    int d = backend_device_index(device);
    if (d < 0) die("device '%.40s' is not one of cpu, cuda", device);
    if (!shared[d]) {
        const char* why;
        shared[d] = backend_open(d, PRECISION_FP32, &why);
        if (!shared[d]) die("%s", why);
    }
    return shared[d];
}

#endif
