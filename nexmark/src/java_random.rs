//! A bit-exact port of `java.util.Random`, the legacy 48-bit linear congruential generator that
//! Beam's Nexmark generator seeds once per event id.

const MULTIPLIER: i64 = 0x5_DEEC_E66D;
const ADDEND: i64 = 0xB;
const MASK: i64 = (1 << 48) - 1;

/// `java.util.Random` with Java's exact arithmetic: same seed, same sequence of draws.
#[derive(Debug, Clone)]
pub struct JavaRandom {
    seed: i64,
}

impl JavaRandom {
    /// `new Random(seed)`.
    pub fn new(seed: i64) -> Self {
        Self { seed: (seed ^ MULTIPLIER) & MASK }
    }

    /// `next(bits)`: advance the generator and return its top `bits` bits.
    fn next(&mut self, bits: u32) -> i32 {
        self.seed = self.seed.wrapping_mul(MULTIPLIER).wrapping_add(ADDEND) & MASK;
        ((self.seed as u64) >> (48 - bits)) as u32 as i32
    }

    /// `nextInt()`: a uniformly distributed signed 32-bit value.
    pub fn next_int(&mut self) -> i32 {
        self.next(32)
    }

    /// `nextInt(bound)`: uniform in `[0, bound)`, with Java's rejection loop.
    ///
    /// # Panics
    /// When `bound <= 0`, as Java throws `IllegalArgumentException`; callers validate the
    /// configuration so that it never happens.
    pub fn next_int_bounded(&mut self, bound: i32) -> i32 {
        assert!(bound > 0, "JavaRandom::next_int_bounded: bound must be positive, got {bound}");
        if bound & bound.wrapping_neg() == bound {
            return ((i64::from(bound) * i64::from(self.next(31))) >> 31) as i32;
        }
        loop {
            let bits = self.next(31);
            let val = bits % bound;
            if bits.wrapping_sub(val).wrapping_add(bound - 1) >= 0 {
                return val;
            }
        }
    }

    /// `nextLong()`: `((long) next(32) << 32) + next(32)`.
    pub fn next_long(&mut self) -> i64 {
        let high = i64::from(self.next(32)) << 32;
        high.wrapping_add(i64::from(self.next(32)))
    }

    /// `nextDouble()`: 53 random bits scaled into `[0, 1)`.
    pub fn next_double(&mut self) -> f64 {
        let high = i64::from(self.next(26)) << 27;
        let bits = high + i64::from(self.next(27));
        bits as f64 * (1.0 / (1_i64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::JavaRandom;

    #[test]
    fn jdk_check_values() {
        assert_eq!(JavaRandom::new(0).next_int(), -1_155_484_576);
        assert_eq!(JavaRandom::new(42).next_int(), -1_170_105_035);
        assert_eq!(JavaRandom::new(0).next_double(), 0.730_967_787_376_657);
        assert_eq!(JavaRandom::new(0).next_long(), -4_962_768_465_676_381_896);
    }

    #[test]
    fn bounded_draws_stay_in_range_for_powers_of_two_and_others() {
        let mut r = JavaRandom::new(7);
        for bound in [1, 2, 3, 10, 16, 1 << 30, i32::MAX] {
            for _ in 0..1000 {
                let v = r.next_int_bounded(bound);
                assert!((0..bound).contains(&v), "{v} not in [0, {bound})");
            }
        }
        // Java: new Random(0).nextInt(10) == 0, new Random(42).nextInt(10) == 0,
        // new Random(0).nextInt(16) == 11 (power-of-two path).
        assert_eq!(JavaRandom::new(0).next_int_bounded(10), 0);
        assert_eq!(JavaRandom::new(42).next_int_bounded(10), 0);
        assert_eq!(JavaRandom::new(0).next_int_bounded(16), 11);
    }
}
