// Where a run computes: the one place a `device` and a `precision` become a backend instance
// (model/backend.h). Training, the studies' evaluations, bench, sample, maps, eval and export
// open their instances here; whoever opens one closes it (backend_close) after freeing the
// models computing on it.
#ifndef DEVICE_H
#define DEVICE_H

#include "../model/backend.h"
#include "config.h"

// An instance of device index `device` (BACKEND_DEVICES) computing in `precision` (PRECISION_*).
// Dies where it cannot run here, saying why after `context` ("recipe.ini: row diff", or NULL):
// "device 'cuda' cannot run here: ..." for the device, "key 'precision': ..." for the precision.
Backend* device_open(int device, int precision, const char* context);
// A run's: cfg's device and precision
Backend* device_open_run(const Config* cfg);
// An evaluation's: cfg's device in fp32, whatever precision cfg trained in (what the studies'
// tables and `eval` compute in)
Backend* device_open_eval(const Config* cfg);
// A command-line option's device (`--device NAME`), in fp32; dies naming the option for a name
// that is not a device
Backend* device_open_option(const char* name, const char* option);
// What reads and writes weights without computing with them (export, a run's init_from): the CPU
Backend* device_open_host(void);

#endif
