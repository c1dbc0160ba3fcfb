sd_floor(low SOURCES low/*.c
  FACES low.h)
sd_floor(high SOURCES high/*.c
  FACES high.h
  USES low)
