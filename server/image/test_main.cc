// The Catch2 main of stoker_image_test.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
