#pragma once
// Fitting a DeviceSpec to measurements of a real device, and a MeshSpec's link costs to measured
// collectives: ferry::calibrate and the measurement files it reads. Needs no arrays.

#include "ferry/model/calibration.hpp"
#include "ferry/model/collective_calibration.hpp"
#include "ferry/model/measurements.hpp"
#include "ferry/model/spec.hpp"
